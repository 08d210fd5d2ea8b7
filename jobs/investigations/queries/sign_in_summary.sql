-- Who signed in or assumed a role, and from which addresses.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("User login summary, via AssumeRole or ConsoleLogin")
-- params:
SELECT userIdentity.arn AS arn, eventName, count(*) AS times, array_agg(DISTINCT sourceIPAddress ORDER BY sourceIPAddress) AS source_ips
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND userIdentity.arn IS NOT NULL
  AND eventName IN ('AssumeRole', 'ConsoleLogin')
GROUP BY userIdentity.arn, eventName
ORDER BY eventName, arn
