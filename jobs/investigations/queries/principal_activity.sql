-- Everything one principal (an IAM user, a role session, root) did, by its ARN.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("User Activity Summary", narrowed to one principal)
-- params: arn
SELECT eventTime, eventID, userIdentity.accessKeyId AS access_key, eventSource, eventName, awsRegion, sourceIPAddress, errorCode
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND userIdentity.arn = :arn
ORDER BY eventTime, eventID
