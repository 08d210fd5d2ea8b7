-- IAM changes that succeeded: every call to IAM that is not a read, and did not fail.
-- source: https://github.com/awslabs/aws-security-analytics-bootstrap/blob/main/AWSSecurityAnalyticsBootstrap/sql/dml/analytics/cloudtrail/cloudtrail_demo_queries.sql ("IAM change summary")
-- params:
SELECT eventTime, eventID, userIdentity.arn AS arn, userIdentity.userName AS user_name, eventName,
       json_extract_scalar(requestParameters, '$.userName') AS target_user,
       json_extract_scalar(requestParameters, '$.roleName') AS target_role,
       json_extract_scalar(requestParameters, '$.policyArn') AS policy_arn
FROM cloudtrail.events
WHERE event_date BETWEEN CAST(:from_date AS DATE) AND CAST(:to_date AS DATE)
  AND eventSource = 'iam.amazonaws.com'
  AND eventName NOT LIKE 'Get%' AND eventName NOT LIKE 'List%' AND eventName NOT LIKE 'Describe%'
  AND errorCode IS NULL
ORDER BY eventTime, eventID
