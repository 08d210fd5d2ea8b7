-- Unauthorized attempts against AWS services, per region, service, operation and error, from the OCSF API Activity table.
-- source: https://docs.aws.amazon.com/security-lake/latest/userguide/cloudtrail-query-examples-sourceversion2.html ("Unauthorized attempts against AWS services")
-- params:
SELECT cloud.region AS region, api.service.name AS service, api.operation AS operation, api.response.error AS error, count(*) AS attempts
FROM cloudtrail.ocsf_api_activity
WHERE eventDay BETWEEN replace(:from_date, '-', '') AND replace(:to_date, '-', '')
  AND api.response.error IN ('Client.UnauthorizedOperation', 'Client.InvalidPermission.NotFound', 'Client.OperationNotPermitted', 'AccessDenied')
GROUP BY cloud.region, api.service.name, api.operation, api.response.error
ORDER BY attempts DESC, region, service, operation, error
