-- Access keys created, by whom and for which user (a persistence step attackers take).
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("Access Key creations with extract of username and keyid")
-- params:
SELECT eventTime, eventID, userIdentity.arn AS arn, awsRegion, sourceIPAddress,
       json_extract_scalar(responseElements, '$.accessKey.userName') AS for_user,
       json_extract_scalar(responseElements, '$.accessKey.accessKeyId') AS new_access_key
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND eventName = 'CreateAccessKey'
  AND errorCode IS NULL
ORDER BY eventTime, eventID
