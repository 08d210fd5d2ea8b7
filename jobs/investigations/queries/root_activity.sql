-- The root user at work: calls the account's root credentials made themselves (not a service on its behalf).
-- source: https://docs.aws.amazon.com/securityhub/latest/userguide/cloudwatch-controls.html#cloudwatch-1 (CloudWatch.1, usage of the root user: its metric filter)
-- params:
SELECT eventTime, eventID, userIdentity.accountId AS account, eventSource, eventName, awsRegion, sourceIPAddress, userAgent, errorCode
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND userIdentity.type = 'Root'
  AND userIdentity.invokedBy IS NULL
  AND (eventType IS NULL OR eventType <> 'AwsServiceEvent')
ORDER BY eventTime, eventID
