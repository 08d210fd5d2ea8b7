"""Rows of the events table as OCSF 1.1.0 API Activity (class 6003): pure column functions and one transform.

The mapping is the OCSF project's CloudTrail mapping for API Activity at 1.1.0, the version Amazon
Security Lake's CloudTrail source writes (ocsf/examples, mappings/markdown/AWS/v1.1.0/CloudTrail):

    eventTime            time (epoch ms), time_dt                   eventID      metadata.uid
    eventVersion         metadata.product.version                   eventType    metadata.event_code
    eventCategory        metadata.product.feature.name              eventName    api.operation, activity_id
    eventSource          api.service.name                           apiVersion   api.version
    requestID            api.request.uid                            requestParameters  api.request.data (JSON)
    responseElements     api.response.data (JSON)                   errorCode    api.response.error, status_id 2
    errorMessage         api.response.message                       userAgent    http_request.user_agent
    sourceIPAddress      src_endpoint.ip, or .domain and .name      vpcEndpointId  src_endpoint.uid
    awsRegion            cloud.region                               recipientAccountId  cloud.account.uid
    userIdentity.arn, .principalId, .type, .userName, .accountId, .accessKeyId (or .credentialId)
                         actor.user.uid, uid_alt, type, name, account.uid, credential_uid
    userIdentity.sessionContext: attributes.creationDate, .mfaAuthenticated, sessionIssuer.arn
                         actor.session.created_time_dt, is_mfa, issuer
    userIdentity.invokedBy  actor.invoked_by                        userIdentity.identityProvider or
                                                                    webIdFederationData.federatedProvider  actor.idp.name
    resources[].ARN, .type, .accountId   resources[].uid, type, owner.account.uid

Everything else of the row (and any value the mapping could not place: a malformed creation date,
a resource without an ARN, request parameters without a request id) is kept in `unmapped`, a map
from the field's path to its value (objects as JSON text), with the fields the decoder rescued
(`_rescued`) and the row's lineage (`_source_file`, `_ingest_run_id`, `_ingest_time`): nothing is dropped.

Two rules where CloudTrail leaves a required OCSF attribute empty (Insights events name no caller and
no source): `actor.invoked_by` and `src_endpoint.svc_name` are then `cloudtrail.amazonaws.com`, the
service that wrote the event, and `api.operation` is the operation the Insight is about (`Unknown`, activity_id 0,
for a record that names no operation at all).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from jobs.lake import ACCOUNT_ID, EVENT_DATE, EVENT_DAY, REGION
from jobs.records.schema import DERIVED_FIELDS, EVENTS_SCHEMA, SESSION_CONTEXT, USER_IDENTITY

OCSF_VERSION = "1.1.0"
PROFILES = ("cloud", "datetime")
CATEGORY_UID, CATEGORY_NAME = 6, "Application Activity"
CLASS_UID, CLASS_NAME = 6003, "API Activity"
# Where CloudTrail names no caller or source, the service that wrote the event stands for them.
CLOUDTRAIL = "cloudtrail.amazonaws.com"
# OCSF's word for a value the source does not give, where the schema requires one.
UNKNOWN = "Unknown"

# activity_id from the operation's verb: its first word, after a `Batch` prefix (BatchGetSecretValue reads).
VERBS: dict[int, tuple[str, ...]] = {
    1: ("Create", "Add", "Allocate", "Copy", "Generate", "Import", "Issue", "Register", "Request", "Run", "Upload"),
    2: ("Get", "Describe", "List", "Lookup", "Search", "Head", "Query", "Scan", "Select", "View", "Check"),
    3: ("Update", "Put", "Modify", "Set", "Change", "Enable", "Disable", "Attach", "Detach", "Associate",
        "Disassociate", "Tag", "Untag", "Start", "Stop", "Reset", "Rotate", "Replace", "Restore", "Authorize",
        "Revoke", "Reboot", "Apply", "Assign", "Unassign", "Accept", "Reject", "Cancel", "Resume"),
    4: ("Delete", "Remove", "Terminate", "Deregister", "Release", "Destroy", "Purge", "Deactivate"),
}  # fmt: skip
ACTIVITY_NAMES = {0: "Unknown", 1: "Create", 2: "Read", 3: "Update", 4: "Delete", 99: "Other"}
# An IPv4 or IPv6 address, each of which OCSF 1.1.0's ip_t accepts: sourceIPAddress is src_endpoint.ip only when it matches.
IP_PATTERN = (
    r"^\s*((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\.){3}(25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)\s*$"
    r"|^\s*(([0-9A-Fa-f]{1,4}:){7}([0-9A-Fa-f]{1,4}|:)|([0-9A-Fa-f]{1,4}:){1,7}:|([0-9A-Fa-f]{1,4}:){1,6}:[0-9A-Fa-f]{1,4}"
    r"|([0-9A-Fa-f]{1,4}:){1,5}(:[0-9A-Fa-f]{1,4}){1,2}|([0-9A-Fa-f]{1,4}:){1,4}(:[0-9A-Fa-f]{1,4}){1,3}"
    r"|([0-9A-Fa-f]{1,4}:){1,3}(:[0-9A-Fa-f]{1,4}){1,4}|([0-9A-Fa-f]{1,4}:){1,2}(:[0-9A-Fa-f]{1,4}){1,5}"
    r"|[0-9A-Fa-f]{1,4}:(:[0-9A-Fa-f]{1,4}){1,6}|:((:[0-9A-Fa-f]{1,4}){1,7}|:))\s*$"
)
ISO_TIME = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})?$"


def text(column: Column) -> Column:
    """A string column with empty text as null (CloudTrail writes `"arn": ""` for an absent ARN)."""
    return F.nullif(column, F.lit(""))


def present(**fields: Column) -> Column:
    """A struct of these fields, or null when every one is null (an empty OCSF object would not validate)."""
    return F.when(any_of(*fields.values()), F.struct(*(value.alias(name) for name, value in fields.items())))


def any_of(*values: Column) -> Column:
    """Whether any of these columns is not null."""
    found = values[0].isNotNull()
    for value in values[1:]:
        found = found | value.isNotNull()
    return found


def activity_id(operation: Column) -> Column:
    """Create 1, Read 2, Update 3, Delete 4 by the operation's verb; Other 99."""
    verb = F.regexp_extract(operation, r"^(?:Batch)?([A-Z][a-z]+)", 1)
    chosen = F.lit(99)
    for uid, words in reversed(VERBS.items()):
        chosen = F.when(verb.isin(*words), F.lit(uid)).otherwise(chosen)
    return F.when(operation.isNull() | (operation == UNKNOWN), F.lit(0)).otherwise(chosen)


def named(uid: Column, names: dict[int, str]) -> Column:
    return F.create_map(*(F.lit(x) for item in names.items() for x in item))[uid]


def failed(row: Column) -> Column:
    """The call failed: an error code, or a console sign-in whose response says Failure (it carries no error code)."""
    return row.getField("errorCode").isNotNull() | (F.get_json_object(row.getField("responseElements"), "$.ConsoleLogin") == "Failure")


def is_ip(address: Column) -> Column:
    return address.rlike(IP_PATTERN) & (F.length(address) <= 40)


def operation(event: Column) -> Column:
    """The API operation; for an Insights event (no eventName), the operation the Insight is about; `Unknown` for a
    record that names none (OCSF requires one)."""
    insight = F.get_json_object(event.getField("insightDetails"), "$.eventName")
    return F.coalesce(event.getField("eventName"), insight, F.lit(UNKNOWN))


def user(identity: Column) -> Column:
    account = text(identity.getField("accountId"))
    credential = F.coalesce(text(identity.getField("accessKeyId")), text(identity.getField("credentialId")))
    fields = {
        "uid": text(identity.getField("arn")),
        "name": text(identity.getField("userName")),
        "account": present(uid=account),
    }
    return F.when(
        any_of(*fields.values()),
        F.struct(
            text(identity.getField("type")).alias("type"),
            fields["name"].alias("name"),
            fields["uid"].alias("uid"),
            text(identity.getField("principalId")).alias("uid_alt"),
            credential.alias("credential_uid"),
            fields["account"].alias("account"),
        ),
    )


def created(session: Column) -> Column:
    """The session's creation time, when it is an ISO time (OCSF's created_time_dt)."""
    raw = session.getField("attributes").getField("creationDate")
    return F.when(raw.rlike(ISO_TIME), F.to_timestamp(raw))


def mfa(session: Column) -> Column:
    raw = F.lower(session.getField("attributes").getField("mfaAuthenticated"))
    return F.when(raw == "true", F.lit(True)).when(raw == "false", F.lit(False))


def actor(event: Column) -> Column:
    identity = event.getField("userIdentity")
    context = identity.getField("sessionContext")
    named_user = user(identity)
    session = present(
        created_time_dt=created(context),
        is_mfa=mfa(context),
        issuer=text(context.getField("sessionIssuer").getField("arn")),
    )
    invoked_by = text(identity.getField("invokedBy"))
    idp = text(F.coalesce(identity.getField("identityProvider"), context.getField("webIdFederationData").getField("federatedProvider")))
    nobody = named_user.isNull() & session.isNull() & invoked_by.isNull()
    return F.struct(
        named_user.alias("user"),
        session.alias("session"),
        F.when(nobody, F.lit(CLOUDTRAIL)).otherwise(invoked_by).alias("invoked_by"),
        present(name=idp).alias("idp"),
    )


def source(event: Column) -> Column:
    address = text(event.getField("sourceIPAddress"))
    ip = F.when(is_ip(address), F.trim(address))
    host = F.when(~is_ip(address), address)
    uid = text(event.getField("vpcEndpointId"))
    nothing = address.isNull() & uid.isNull()
    return F.struct(
        ip.alias("ip"), host.alias("domain"), host.alias("name"), uid.alias("uid"),
        F.when(nothing, F.lit(CLOUDTRAIL)).alias("svc_name"),
    )  # fmt: skip


def api(event: Column) -> Column:
    request_id = text(event.getField("requestID"))
    return F.struct(
        operation(event).alias("operation"),
        present(name=text(event.getField("eventSource"))).alias("service"),
        text(event.getField("apiVersion")).alias("version"),
        F.when(request_id.isNotNull(), F.struct(request_id.alias("uid"), event.getField("requestParameters").alias("data"))).alias(
            "request"
        ),
        present(error=event.getField("errorCode"), message=event.getField("errorMessage"), data=event.getField("responseElements")).alias(
            "response"
        ),
    )


def resources(event: Column) -> Column:
    """The resources with an ARN (OCSF needs a uid or a name); the row's whole `resources` goes to unmapped otherwise."""
    listed = F.filter(event.getField("resources"), lambda r: text(r.getField("ARN")).isNotNull())
    return F.transform(
        listed,
        lambda r: F.struct(
            r.getField("ARN").alias("uid"),
            text(r.getField("type")).alias("type"),
            present(account=present(uid=text(r.getField("accountId")))).alias("owner"),
        ),
    )


def metadata(event: Column) -> Column:
    product = F.struct(
        F.lit("CloudTrail").alias("name"),
        F.lit("AWS").alias("vendor_name"),
        event.getField("eventVersion").alias("version"),
        present(name=event.getField("eventCategory")).alias("feature"),
    )
    return F.struct(
        product.alias("product"),
        event.getField("eventID").alias("uid"),
        F.lit(OCSF_VERSION).alias("version"),
        F.array(*(F.lit(p) for p in PROFILES)).alias("profiles"),
        event.getField("eventType").alias("event_code"),
    )


def cloud(event: Column) -> Column:
    account = text(event.getField("recipientAccountId"))
    return F.struct(
        F.lit("AWS").alias("provider"),
        event.getField("awsRegion").alias("region"),
        F.when(account.isNotNull(), F.struct(account.alias("uid"), F.lit("AWS Account").alias("type"), F.lit(10).alias("type_id")))
        .alias("account"),
    )  # fmt: skip


def as_text(column: Column, data_type: T.DataType) -> Column:
    """A value of the events table as unmapped text: strings as they are, objects as JSON, times as ISO 8601."""
    if isinstance(data_type, T.StringType):
        return column
    if isinstance(data_type, (T.StructType, T.ArrayType, T.MapType)):
        return F.nullif(F.to_json(column), F.lit("{}"))  # an object with no field set is no value
    if isinstance(data_type, T.TimestampType):
        return F.date_format(column, "yyyy-MM-dd'T'HH:mm:ss.SSSXXX")  # as time_dt and JSON write times
    return column.cast("string")


def unmapped(events: DataFrame) -> Column:
    """What the mapping does not place, by field path: the record's other fields, what it could not place, the fields
    the decoder rescued (by their own names) and the row's lineage."""
    identity, context = F.col("userIdentity"), F.col("userIdentity.sessionContext")
    no_user = user(identity).isNull()
    entries = {name: as_text(F.col(name), events.schema[name].dataType) for name in UNMAPPED_FIELDS}
    entries |= {
        f"userIdentity.sessionContext.{name}": as_text(context.getField(name), SESSION_CONTEXT[name].dataType) for name in UNMAPPED_CONTEXT
    }
    entries |= {
        f"userIdentity.{name}": as_text(identity.getField(name), USER_IDENTITY[name].dataType) for name in ("onBehalfOf", "inScopeOf")
    }
    entries |= {
        # Placed only with a user to place them in; a credential id also when an access key took its place.
        **{f"userIdentity.{name}": F.when(no_user, text(identity.getField(name))) for name in ("type", "principalId", "accessKeyId")},
        "userIdentity.credentialId": F.when(
            no_user | text(identity.getField("accessKeyId")).isNotNull(), identity.getField("credentialId")
        ),
        "userIdentity.sessionContext.attributes.creationDate": F.when(
            created(context).isNull(), context.getField("attributes").getField("creationDate")
        ),
        "userIdentity.sessionContext.attributes.mfaAuthenticated": F.when(
            mfa(context).isNull(), context.getField("attributes").getField("mfaAuthenticated")
        ),
        "requestParameters": F.when(text(F.col("requestID")).isNull(), F.col("requestParameters")),
        "resources": F.when(F.exists(F.col("resources"), lambda r: text(r.getField("ARN")).isNull()), F.to_json("resources")),
        **{name: F.when(F.col(name) == "", F.col(name)) for name in BLANKABLE},
    }  # fmt: skip
    pairs = F.array(*(F.struct(F.lit(key).alias("key"), value.alias("value")) for key, value in entries.items()))
    placed = F.map_from_entries(F.filter(pairs, lambda pair: pair.getField("value").isNotNull()))
    rescued = F.coalesce(F.from_json("_rescued", "map<string,string>"), F.create_map().cast("map<string,string>"))
    return F.map_concat(placed, rescued)


# The events table's columns the mapping places (userIdentity's parts, requestParameters and the blank ones are
# also kept in unmapped where a place cannot take them, below; _rescued's fields are spread into unmapped).
MAPPED_FIELDS = (
    "eventVersion", "userIdentity", "eventTime", "eventSource", "eventName", "awsRegion", "sourceIPAddress", "userAgent",
    "errorCode", "errorMessage", "requestParameters", "responseElements", "requestID", "eventID", "resources", "eventType",
    "apiVersion", "recipientAccountId", "vpcEndpointId", "eventCategory", "_rescued",
)  # fmt: skip
# Every other column of the events table, kept in unmapped whole (the row's lineage among them): a column added to
# jobs/records/schema.py lands here by itself, so nothing is dropped.
UNMAPPED_FIELDS = tuple(
    name for name in EVENTS_SCHEMA.fieldNames() if name not in MAPPED_FIELDS and name not in {field[0] for field in DERIVED_FIELDS}
)
UNMAPPED_CONTEXT = ("sessionIssuer", "webIdFederationData", "sourceIdentity", "ec2RoleDelivery", "assumedRoot")
# Top-level fields the mapping reads as null when empty: an empty one is kept as it was.
BLANKABLE = ("requestID", "apiVersion", "eventSource", "vpcEndpointId", "sourceIPAddress", "recipientAccountId")


def api_activity(events: DataFrame) -> DataFrame:
    """Rows of the events table -> OCSF API Activity rows, with the partition columns Security Lake uses."""
    event = F.struct(*events.columns)
    activity = activity_id(operation(event))
    status_id = F.when(failed(event), F.lit(2)).otherwise(F.lit(1))
    return events.select(
        metadata(event).alias("metadata"),
        F.unix_millis(F.col("eventTime")).alias("time"),  # epoch ms
        F.col("eventTime").alias("time_dt"),
        cloud(event).alias("cloud"),
        api(event).alias("api"),
        actor(event).alias("actor"),
        present(user_agent=F.col("userAgent")).alias("http_request"),
        source(event).alias("src_endpoint"),
        resources(event).alias("resources"),
        F.lit(CLASS_UID).alias("class_uid"),
        F.lit(CLASS_NAME).alias("class_name"),
        F.lit(CATEGORY_UID).alias("category_uid"),
        F.lit(CATEGORY_NAME).alias("category_name"),
        activity.alias("activity_id"),
        named(activity, ACTIVITY_NAMES).alias("activity_name"),
        (F.lit(CLASS_UID * 100) + activity).cast("long").alias("type_uid"),
        F.concat(F.lit(f"{CLASS_NAME}: "), named(activity, ACTIVITY_NAMES)).alias("type_name"),
        F.lit(1).alias("severity_id"),
        F.lit("Informational").alias("severity"),
        status_id.alias("status_id"),
        named(status_id, {1: "Success", 2: "Failure"}).alias("status"),
        unmapped(events).alias("unmapped"),
        F.col("awsRegion").alias(REGION),
        F.col("recipientAccountId").alias(ACCOUNT_ID),
        F.date_format(EVENT_DATE, "yyyyMMdd").alias(EVENT_DAY),
    )
