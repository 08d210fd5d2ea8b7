-- IAM users who signed in to the console without MFA, successfully.
-- source: https://docs.aws.amazon.com/securityhub/latest/userguide/cloudwatch-controls.html#cloudwatch-3 (CloudWatch.3, console sign-in without MFA: its metric filter)
-- params:
SELECT eventTime, eventID, userIdentity.arn AS arn, sourceIPAddress, userAgent, awsRegion
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND eventName = 'ConsoleLogin'
  AND userIdentity.type = 'IAMUser'
  AND coalesce(json_extract_scalar(additionalEventData, '$.MFAUsed'), '') <> 'Yes'
  AND json_extract_scalar(responseElements, '$.ConsoleLogin') = 'Success'
ORDER BY eventTime, eventID
