"""The events table schema: every documented CloudTrail record field, typed.

Fields whose JSON type changes from record to record (request/response payloads, service
event details, insight details) are kept as their raw JSON text, so no value is coerced.
Structured fields are parsed from their raw text; when that parse fails (for example
``resources`` given as a list of strings) the raw text is kept in ``_rescued`` instead.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.lake import EVENT_DATE, REASON


def _strings(*names: str) -> list[T.StructField]:
    return [T.StructField(name, T.StringType()) for name in names]


SESSION_ISSUER = T.StructType(_strings("type", "principalId", "arn", "accountId", "userName"))
WEB_ID_FEDERATION_DATA = T.StructType(
    # attributes is a free-form object: keep it as raw JSON text.
    _strings("federatedProvider", "attributes")
)
SESSION_CONTEXT = T.StructType(
    [
        T.StructField("sessionIssuer", SESSION_ISSUER),
        T.StructField("webIdFederationData", WEB_ID_FEDERATION_DATA),
        T.StructField("attributes", T.StructType(_strings("creationDate", "mfaAuthenticated"))),
        *_strings("sourceIdentity", "ec2RoleDelivery", "assumedRoot"),
    ]
)
USER_IDENTITY = T.StructType(
    [
        *_strings(
            "type",
            "principalId",
            "arn",
            "accountId",
            "accessKeyId",
            "userName",
            "invokedBy",
            "identityProvider",
            "credentialId",
        ),
        T.StructField("sessionContext", SESSION_CONTEXT),
        T.StructField("onBehalfOf", T.StructType(_strings("userId", "identityStoreArn"))),
        T.StructField(
            "inScopeOf",
            T.StructType(_strings("issuerType", "credentialsIssuedTo", "issuerAccountId", "issuerArn")),
        ),
    ]
)
RESOURCES = T.ArrayType(T.StructType(_strings("ARN", "accountId", "type")))
TLS_DETAILS = T.StructType(_strings("tlsVersion", "cipherSuite", "clientProvidedHostHeader"))
ADDENDUM = T.StructType(_strings("reason", "updatedFields", "originalRequestID", "originalEventID"))

# Record fields in table order: (name, type, how the raw map value becomes the column).
#   "string": the value as is (raw JSON text for objects and arrays);
#   "json":   parsed with from_json into the given type;
#   "bool":   cast to boolean ("true"/"True"/"false").
RECORD_FIELDS: list[tuple[str, T.DataType, str]] = [
    ("eventVersion", T.StringType(), "string"),
    ("userIdentity", USER_IDENTITY, "json"),
    ("eventTime", T.TimestampType(), "timestamp"),
    ("eventSource", T.StringType(), "string"),
    ("eventName", T.StringType(), "string"),
    ("awsRegion", T.StringType(), "string"),
    ("sourceIPAddress", T.StringType(), "string"),
    ("userAgent", T.StringType(), "string"),
    ("errorCode", T.StringType(), "string"),
    ("errorMessage", T.StringType(), "string"),
    ("requestParameters", T.StringType(), "string"),
    ("responseElements", T.StringType(), "string"),
    ("additionalEventData", T.StringType(), "string"),
    ("requestID", T.StringType(), "string"),
    ("eventID", T.StringType(), "string"),
    ("readOnly", T.BooleanType(), "bool"),
    ("resources", RESOURCES, "json"),
    ("eventType", T.StringType(), "string"),
    ("apiVersion", T.StringType(), "string"),
    ("managementEvent", T.BooleanType(), "bool"),
    ("recipientAccountId", T.StringType(), "string"),
    ("serviceEventDetails", T.StringType(), "string"),
    ("sharedEventID", T.StringType(), "string"),
    ("vpcEndpointId", T.StringType(), "string"),
    ("vpcEndpointAccountId", T.StringType(), "string"),
    ("eventCategory", T.StringType(), "string"),
    ("addendum", ADDENDUM, "json"),
    ("sessionCredentialFromConsole", T.BooleanType(), "bool"),
    ("edgeDeviceDetails", T.StringType(), "string"),
    ("tlsDetails", TLS_DETAILS, "json"),
    ("insightDetails", T.StringType(), "string"),
]
KNOWN_FIELDS = [name for name, _, _ in RECORD_FIELDS]

# Columns the job adds to every row.
METADATA_FIELDS = [
    T.StructField("_rescued", T.StringType()),
    T.StructField("_source_file", T.StringType()),
    T.StructField("_ingest_run_id", T.StringType()),
    T.StructField("_ingest_time", T.TimestampType()),
]
# Columns computed from a record's own fields, after them in the table: name, type, and how it is computed
# from the typed record (`field(name)`: one of its columns). A new derived column is one entry here and its
# test (tests/test_transforms.py); jobs/transforms.normalize_records computes every entry.
DERIVED_FIELDS: list[tuple[str, T.DataType, Callable[[Callable[[str], Column]], Column]]] = [
    (EVENT_DATE, T.DateType(), lambda field: F.to_date(field("eventTime"))),
]
EVENTS_SCHEMA = T.StructType(
    [T.StructField(name, data_type) for name, data_type, _ in RECORD_FIELDS]
    + METADATA_FIELDS
    + [T.StructField(name, data_type) for name, data_type, _ in DERIVED_FIELDS]
)
# The events table's data files: every column but the date, which their partition folder holds.
EVENTS_DATA_SCHEMA = T.StructType([field for field in EVENTS_SCHEMA.fields if field.name != EVENT_DATE])

QUARANTINE_SCHEMA = T.StructType(
    [
        T.StructField("source_file", T.StringType()),
        T.StructField("record_index", T.IntegerType()),
        T.StructField("record", T.StringType()),
        T.StructField("detail", T.StringType()),
        T.StructField("_ingest_run_id", T.StringType()),
        T.StructField("_ingest_time", T.TimestampType()),
        T.StructField(REASON, T.StringType()),
    ]
)

# eventTime is ISO-8601 in UTC ("2023-07-10T11:42:18Z"); fractions and offsets are
# accepted, a 12-hour "hh" pattern never is.
EVENT_TIME_FORMAT = "yyyy-MM-dd'T'HH:mm:ss[.SSSSSS]XXX"

# How the records chain reads a container's records: typed in the pass that finds them (jobs/records/decode.py); a
# container that needs the slow path (jobs/records/transforms.py) is split into record texts first.
TYPED_RECORD = T.StructType(
    # The table's types, except eventTime, kept as text to check its format, and the flags, kept as text
    # because CloudTrail writes some as strings ("true"): a boolean field would come out null and cost a second parse.
    [T.StructField(name, T.StringType() if kind in ("timestamp", "bool") else data_type) for name, data_type, kind in RECORD_FIELDS]
)
RECORD_TEXTS = T.StructType([T.StructField("Records", T.ArrayType(T.StringType()))])
RECORD_TEXT_ARRAY = T.ArrayType(T.StringType())
RAW_RECORD = T.MapType(T.StringType(), T.StringType())
