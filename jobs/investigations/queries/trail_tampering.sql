-- Changes to CloudTrail itself: trails created, changed, deleted, stopped or started, and what came of each.
-- source: https://docs.aws.amazon.com/securityhub/latest/userguide/cloudwatch-controls.html#cloudwatch-5 (CloudWatch.5, CloudTrail configuration changes: its metric filter)
-- params:
SELECT eventTime, eventID, userIdentity.arn AS arn, eventName, awsRegion, sourceIPAddress, errorCode,
       json_extract_scalar(requestParameters, '$.name') AS trail
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND eventSource = 'cloudtrail.amazonaws.com'
  AND eventName IN ('CreateTrail', 'UpdateTrail', 'DeleteTrail', 'StartLogging', 'StopLogging')
ORDER BY eventTime, eventID
