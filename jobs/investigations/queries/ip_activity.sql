-- Everything called from one source address, and by whom.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("Identify API events made from a public IP", narrowed to one address)
-- params: ip
SELECT eventTime, eventID, userIdentity.arn AS arn, userIdentity.accessKeyId AS access_key, eventSource, eventName, awsRegion, errorCode
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND sourceIPAddress = :ip
ORDER BY eventTime, eventID
