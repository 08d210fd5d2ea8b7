-- Everything one access key did: each call, from where, and what came of it.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("User Activity Summary", narrowed to one access key)
-- params: access_key
SELECT eventTime, eventID, userIdentity.arn AS arn, eventSource, eventName, awsRegion, sourceIPAddress, userAgent, errorCode
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND userIdentity.accessKeyId = :access_key
ORDER BY eventTime, eventID
