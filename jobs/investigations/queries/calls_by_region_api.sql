-- How many calls, per region, service and call: where the activity is.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("Summary of event count by Region and EventName")
-- params:
SELECT awsRegion, eventSource, eventName, count(*) AS calls
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
GROUP BY awsRegion, eventSource, eventName
ORDER BY awsRegion, calls DESC, eventSource, eventName
