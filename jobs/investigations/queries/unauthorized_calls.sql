-- Calls refused for want of permission, per principal and call: who is probing, or misconfigured.
-- source: https://docs.aws.amazon.com/securityhub/latest/userguide/cloudwatch-controls.html#cloudwatch-2 (CloudWatch.2, unauthorized API calls: its metric filter's error codes)
-- params:
SELECT userIdentity.arn AS arn, eventSource, eventName, errorCode, count(*) AS calls, min(eventTime) AS first_seen, max(eventTime) AS last_seen
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND (errorCode LIKE '%UnauthorizedOperation' OR errorCode LIKE 'AccessDenied%')
GROUP BY userIdentity.arn, eventSource, eventName, errorCode
ORDER BY calls DESC, arn, eventSource, eventName, errorCode
