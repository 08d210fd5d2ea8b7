-- Calls from public addresses (not RFC 1918, not an AWS service's name), per address and principal.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("Identify API events made from a public IP"; the private ranges as patterns, so any engine runs it)
-- params:
SELECT sourceIPAddress, userIdentity.arn AS arn, count(*) AS calls, min(eventTime) AS first_seen, max(eventTime) AS last_seen
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND regexp_like(sourceIPAddress, '^[0-9]')
  AND NOT regexp_like(sourceIPAddress, '^(10\.|192\.168\.|172\.(1[6-9]|2[0-9]|3[01])\.)')
GROUP BY sourceIPAddress, userIdentity.arn
ORDER BY calls DESC, sourceIPAddress, arn
