"""AgentDojo's tools as tether tools, each declared once from its own documentation.

The rule every declaration below follows (it is applied to a tool's docstring and return
type, never to a task, and never changed to move a number):

1. **private_data**: the tool returns data the user owns: their mail, calendar, drive,
   contacts, bank account and profile, the messages and member lists of their Slack.
2. **untrusted_input**: the result can carry text that someone other than the user
   wrote: an email body (a mailbox is where others write, and a sent reply quotes them), a
   calendar event (invitations, descriptions), a file in a drive others share and edit, a
   transaction's subject (the sender writes it), a listing or a review, a web page, a chat
   message, and names others choose (a Slack channel's name, a member's user name). What
   only the user or their bank writes (their IBAN, balance, profile, contact list,
   standing orders) does not count.
3. **external_send**: what the tool does leaves the user's control: a message, an email a
   calendar change sends to participants, a share, an invitation, a payment (also one
   scheduled), a booking (it hands the user's details to a business), a post, any request
   to a URL (the URL itself can carry data out).
4. **destructive**: it changes or deletes something that already exists: an edit, an
   append, a cancellation, a reschedule, an update, a deletion. Creating something new or
   sending is not destructive by itself.

Parameters: **content** parameters carry what the call moves along or writes: free text (a
body, a subject, a title, a description, a file's content), a quantity (an amount), a date
or a time, the values written into a record (a profile's name and address, a new
password). Every other parameter is **control**: it names what is acted on, for whom or
where (an id, a file, an event, a recipient, an account, a channel, a user, a business, a
URL, an access level). **Destinations** are the control parameters that say
where a send goes (recipients, an account, a URL, a person given access). The two tables
``CONTENT_PARAMS`` and ``DESTINATION_PARAMS`` become each tool's ``content_params`` and
``destination_params`` (the provenance gate reads them; the interlock does not); parameters
absent from both are control.

**Field labels** (who writes each field of a result: ``tether.fields``) are written once
per data model, never per tool call or task, by this rule (``field_labels``):

- **service**: the id a service mints for one of the user's records: an email's, a
  calendar event's, a drive file's, a transaction's id.
- **user**: what only the user writes, in the user's own records: the headers of an email
  the user sent (its sender, recipients, cc and bcc: the sender is the inbox's own
  address), a file the user owns (its owner, the people it is shared with and its name:
  the owner is the drive's own account), the accounts of an outgoing transaction (the
  sender is the user's own IBAN), the user's profile (names, address, email, phone).
  Whether a record is the user's own is read from the record and the environment's own
  account (the inbox's, the drive's, the bank account's), never from a task.
- **others**: every other field: every free-text field (a subject, a body, a title, a
  description, a file's content, a message), every field of a record someone else made
  (an email received, a file shared with the user, an incoming transaction, a calendar
  event: it has no organizer, so who wrote its participants cannot be told), and every
  name a member of a chat chooses (a channel's, a user's).
- **secret**: an identity document's, a card's or a bank account's number, a password.

**Closed destinations**: a tool whose sends stay in the user's own chat workspace (a channel
message, a direct message, adding a member to a channel) declares them closed
(``CLOSED_DESTINATIONS``); an email, an invitation by email address, a web page or a
payment never.

A tool's name means the same function in every suite that offers it (checked in
``suite_tools``), so one declaration per name is enough.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from agentdojo.agent_pipeline.tool_execution import tool_result_to_str
from agentdojo.default_suites.v1.tools.banking_client import Transaction
from agentdojo.default_suites.v1.tools.travel_booking_client import User
from agentdojo.default_suites.v1.tools.types import CalendarEvent, CloudDriveFile, Email
from agentdojo.default_suites.v1.tools.user_account import UserAccount
from agentdojo.functions_runtime import FunctionsRuntime, TaskEnvironment
from agentdojo.task_suite.task_suite import TaskSuite

from tether.fields import Declared, Marker, Secret, WrittenBy, fields_of
from tether.messages import FieldLabel
from tether.tools.spec import ToolSpec
from tether.tools.tool import Tool, ToolContext, ToolOutput, Validator, json_schema_validator
from tether.trust import Capabilities

_P = Capabilities(private_data=True)
_U = Capabilities(untrusted_input=True)
_S = Capabilities(external_send=True)
_D = Capabilities(destructive=True)
_NONE = Capabilities()

TOOL_CAPABILITIES: Mapping[str, Capabilities] = {
    # --- workspace: email (also in travel: send_email) --------------------------------------
    "send_email": _S,  # returns the email it sent: the model's own words
    "delete_email": _D,
    "get_unread_emails": _P | _U,
    "get_sent_emails": _P | _U,
    "get_received_emails": _P | _U,
    "get_draft_emails": _P | _U,
    "search_emails": _P | _U,
    "search_contacts_by_name": _P,
    "search_contacts_by_email": _P,
    # --- workspace and travel: calendar --------------------------------------------------------
    "get_current_day": _NONE,
    "search_calendar_events": _P | _U,
    "get_day_calendar_events": _P | _U,
    "create_calendar_event": _S,  # "also sends an email to the participants"
    "cancel_calendar_event": _D | _S,  # emails the participants; returns a fixed message
    "reschedule_calendar_event": _P | _U | _D | _S,  # returns the event, emails participants
    "add_calendar_event_participants": _P | _U | _D | _S,  # returns the event, emails them
    # --- workspace: cloud drive ----------------------------------------------------------------
    "append_to_file": _P | _U | _D,  # returns the whole file
    "search_files_by_filename": _P | _U,
    "create_file": _NONE,  # returns what it was given
    "delete_file": _P | _U | _D,  # "returns the file that was deleted"
    "get_file_by_id": _P | _U,
    "list_files": _P | _U,
    "share_file": _P | _U | _S,  # returns the file
    "search_files": _P | _U,
    # --- travel: public listings and the user's profile ---------------------------------------
    "get_user_information": _P,
    "get_all_hotels_in_city": _U,
    "get_hotels_prices": _U,
    "get_rating_reviews_for_hotels": _U,
    "get_hotels_address": _U,
    "get_all_restaurants_in_city": _U,
    "get_cuisine_type_for_restaurants": _U,
    "get_restaurants_address": _U,
    "get_rating_reviews_for_restaurants": _U,
    "get_dietary_restrictions_for_all_restaurants": _U,
    "get_contact_information_for_restaurants": _U,
    "get_price_for_restaurants": _U,
    "check_restaurant_opening_hours": _U,
    "get_all_car_rental_companies_in_city": _U,
    "get_car_types_available": _U,
    "get_rating_reviews_for_car_rental": _U,
    "get_car_fuel_options": _U,
    "get_car_rental_address": _U,
    "get_car_price_per_day": _U,
    "get_flight_information": _U,
    "reserve_hotel": _S,
    "reserve_car_rental": _S,
    "reserve_restaurant": _S,
    # --- banking -----------------------------------------------------------------------------
    "get_iban": _P,
    "send_money": _S,
    "schedule_transaction": _S,
    "update_scheduled_transaction": _D | _S,
    "get_balance": _P,
    "get_most_recent_transactions": _P | _U,  # senders write the subjects
    "get_scheduled_transactions": _P,  # the user's own standing orders
    "read_file": _P | _U,  # a file's text is whoever wrote the file
    "get_user_info": _P,
    "update_password": _D,
    "update_user_info": _P | _D,  # returns the updated profile
    # --- slack -------------------------------------------------------------------------------
    "get_channels": _P | _U,  # any member can name a channel
    "add_user_to_channel": _S,  # gives a person the channel's messages
    "read_channel_messages": _P | _U,
    "read_inbox": _P | _U,
    "send_direct_message": _S,
    "send_channel_message": _S,
    "get_users_in_channel": _P | _U,  # members choose their names
    "invite_user_to_slack": _S,
    "remove_user_from_slack": _D,
    "get_webpage": _U | _S,  # like tether's fetch_url: outside text, and a request out
    "post_webpage": _S,
}

CONTENT_PARAMS: Mapping[str, tuple[str, ...]] = {
    "send_email": ("subject", "body"),
    "create_calendar_event": ("title", "description", "location", "start_time", "end_time"),
    "reschedule_calendar_event": ("new_start_time", "new_end_time"),
    "append_to_file": ("content",),
    "create_file": ("content",),
    "reserve_hotel": ("start_day", "end_day"),
    "reserve_car_rental": ("start_time", "end_time"),
    "reserve_restaurant": ("start_time",),
    "send_money": ("subject", "amount", "date"),
    "schedule_transaction": ("subject", "amount", "date"),
    "update_scheduled_transaction": ("subject", "amount", "date"),
    "update_password": ("password",),
    "update_user_info": ("first_name", "last_name", "street", "city"),
    "send_direct_message": ("body",),
    "send_channel_message": ("body",),
    "post_webpage": ("content",),
}

DESTINATION_PARAMS: Mapping[str, tuple[str, ...]] = {
    "send_email": ("recipients", "cc", "bcc"),
    "create_calendar_event": ("participants",),
    "add_calendar_event_participants": ("participants",),
    "share_file": ("email",),
    "reserve_hotel": ("hotel",),
    "reserve_car_rental": ("company",),
    "reserve_restaurant": ("restaurant",),
    "send_money": ("recipient",),
    "schedule_transaction": ("recipient",),
    "update_scheduled_transaction": ("recipient",),
    "add_user_to_channel": ("user",),
    "send_direct_message": ("recipient",),
    "send_channel_message": ("channel",),
    "invite_user_to_slack": ("user_email",),
    "get_webpage": ("url",),
    "post_webpage": ("url",),
}


CLOSED_DESTINATIONS = frozenset({"send_direct_message", "send_channel_message",
                                 "add_user_to_channel"})

# **Documented fields**: an object parameter whose own description names its fields (and
# whose JSON Schema, a bare ``dict``, does not) gets them declared as properties, so the
# gate reads them as the tool's names rather than as names the model chose. Read from the
# parameter's description, never from a task: send_email's ``attachments`` ("a field
# \"file_id\"", "in the field \"event_details\"", each with a "type").
DOCUMENTED_FIELDS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("send_email", "attachments"): ("type", "file_id", "event_details"),
}


def with_documented_fields(tool: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` with the ``DOCUMENTED_FIELDS`` of ``tool``'s object parameters declared
    (``additionalProperties`` kept: nothing the model may send is narrowed)."""
    for (name, parameter), fields in DOCUMENTED_FIELDS.items():
        prop = schema.get("properties", {}).get(parameter) if name == tool else None
        if prop is None:
            continue
        for option in prop.get("anyOf", [prop]):
            items = option.get("items")
            if isinstance(items, dict) and items.get("type") == "object":
                items.setdefault("properties", {}).update({f: {} for f in fields})
    return schema

_SERVICE: tuple[Marker, ...] = (WrittenBy.service,)
_USER: tuple[Marker, ...] = (WrittenBy.user,)
_SECRET: tuple[Marker, ...] = (WrittenBy.user, Secret)

# The fields every record of a class has labelled, whoever's it is.
_ALWAYS: dict[type, dict[str, tuple[Marker, ...]]] = {
    Email: {"id_": _SERVICE},
    CalendarEvent: {"id_": _SERVICE},
    CloudDriveFile: {"id_": _SERVICE},
    Transaction: {"id": _SERVICE},
    User: {"first_name": _USER, "last_name": _USER, "email": _USER, "phone_number": _USER,
           "address": _USER, "passport_number": _SECRET, "bank_account_number": _SECRET,
           "credit_card_number": _SECRET},
    UserAccount: {"first_name": _USER, "last_name": _USER, "street": _USER, "city": _USER,
                  "password": _SECRET},
}
# The fields a record of the user's own adds (see the rule: the environment's own account).
_OWN: dict[type, dict[str, tuple[Marker, ...]]] = {
    Email: {"sender": _USER, "recipients": _USER, "cc": _USER, "bcc": _USER},
    CloudDriveFile: {"owner": _USER, "shared_with": _USER, "filename": _USER},
    Transaction: {"sender": _USER, "recipient": _USER},
}


def _account(environment: TaskEnvironment, owner: str, field: str) -> Any:
    return getattr(getattr(environment, owner, None), field, None)


def _own(record: Any, environment: TaskEnvironment) -> bool:
    """Whether ``record`` is the user's own: its writer is the environment's account."""
    if isinstance(record, Email):
        return record.sender == _account(environment, "inbox", "account_email")
    if isinstance(record, CloudDriveFile):
        return record.owner == _account(environment, "cloud_drive", "account_email")
    if isinstance(record, Transaction):
        return record.sender == _account(environment, "bank_account", "iban")
    return False


# The tools that return a profile as a mapping (its keys are the model's fields, renamed).
_PROFILES: dict[str, dict[str, tuple[Marker, ...]]] = {
    "get_user_information": {
        "First Name": _USER, "Last Name": _USER, "Email": _USER, "Phone Number": _USER,
        "Address": _USER, "ID Number": _SECRET, "Passport Number": _SECRET,
        "Bank Account Number": _SECRET, "Credit Card Number": _SECRET},
    "get_user_info": {"first_name": _USER, "last_name": _USER, "street": _USER,
                      "city": _USER, "password": _SECRET},
}


def field_labels(result: Any, environment: TaskEnvironment,
                 tool: str = "") -> tuple[FieldLabel, ...]:
    """The labelled values of ``tool``'s ``result``, by the rule above."""
    profile = _PROFILES.get(tool)
    if profile is not None and isinstance(result, dict):
        return tuple(FieldLabel(f".{key}", str(value), "user", Secret in profile[key])
                     for key, value in result.items()
                     if key in profile and isinstance(value, str | int) and str(value))
    items = list(enumerate(result)) if isinstance(result, list) else [(None, result)]
    out: list[FieldLabel] = []
    for i, record in items:
        declared: Declared = _ALWAYS
        if type(record) in _OWN and _own(record, environment):
            declared = {**_ALWAYS, type(record): {**_ALWAYS.get(type(record), {}),
                                                  **_OWN[type(record)]}}
        prefix = "" if i is None else f"[{i}]"
        out.extend(FieldLabel(prefix + f.path, f.value, f.by, f.secret)
                   for f in fields_of(record, declared))
    return tuple(out)


@dataclass(frozen=True, slots=True)
class Declarations:
    """One benchmark's declaration tables (this module's for AgentDojo's suites;
    ``agentdyn_tools`` holds AgentDyn's, written by the same rule)."""

    capabilities: Mapping[str, Capabilities]
    content: Mapping[str, tuple[str, ...]]
    destinations: Mapping[str, tuple[str, ...]]
    closed: frozenset[str]
    profiles: Mapping[str, Mapping[str, tuple[Marker, ...]]]
    labels: Any  # (result, environment, tool) -> tuple[FieldLabel, ...]


class UndeclaredToolError(LookupError):
    """A suite offers a tool the tables above do not declare: declare it, never default."""


@dataclass(frozen=True, slots=True)
class _Declared:
    spec: ToolSpec
    capabilities: Capabilities
    validate: Validator


@dataclass(frozen=True, slots=True)
class SuiteTools:
    """One suite's tools, declared and compiled once; ``for_environment`` binds them to the
    environment of one run, so AgentDojo's own functions change that copy and its checks
    judge it afterwards."""

    suite_name: str
    runtime: FunctionsRuntime
    declared: tuple[_Declared, ...]
    tables: Declarations | None = None  # None: this module's (AgentDojo's)

    def for_environment(self, environment: TaskEnvironment) -> list[Tool]:
        t = self.tables or AGENTDOJO
        return [Tool(d.spec, _handler(self.runtime, environment, d.spec.name, t.labels),
                     d.capabilities, d.validate, origin="agentdojo",
                     content_params=t.content.get(d.spec.name, ()),
                     destination_params=t.destinations.get(d.spec.name, ()),
                     closed_destinations=d.spec.name in t.closed,
                     returns_secrets=d.spec.name in t.profiles)
                for d in self.declared]


def suite_tools(suite: TaskSuite[Any], seen: dict[str, Any] | None = None,
                tables: Declarations | None = None) -> SuiteTools:
    """Declare ``suite``'s tools from the tables (``tables``, AgentDojo's by default);
    raises ``UndeclaredToolError`` for a tool they do not name. ``seen`` (name -> function)
    checks one name is one function across suites."""
    declared = []
    for function in suite.tools:
        caps = (tables or AGENTDOJO).capabilities.get(function.name)
        if caps is None:
            raise UndeclaredToolError(f"{suite.name}: tool {function.name!r} has no declaration")
        if seen is not None:
            other = seen.setdefault(function.name, function.run)
            if other is not function.run:
                raise UndeclaredToolError(
                    f"{suite.name}: {function.name!r} is a different function than in another "
                    "suite; one declaration cannot cover both")
        # The model sees AgentDojo's own description and JSON Schema; the schema also
        # validates arguments at tether's gate, before AgentDojo's runtime validates again.
        schema = with_documented_fields(function.name, function.parameters.model_json_schema())
        spec = ToolSpec(function.name, function.description, schema)
        declared.append(_Declared(spec, caps, json_schema_validator(schema)))
    return SuiteTools(suite.name, FunctionsRuntime(suite.tools), tuple(declared), tables)


AGENTDOJO = Declarations(TOOL_CAPABILITIES, CONTENT_PARAMS, DESTINATION_PARAMS,
                         CLOSED_DESTINATIONS, _PROFILES, field_labels)


def parameter_roles(tool: str, parameters: Sequence[str]) -> dict[str, str]:
    """Each parameter's role: ``content``, ``destination`` or ``control``."""
    content = CONTENT_PARAMS.get(tool, ())
    destinations = DESTINATION_PARAMS.get(tool, ())
    return {p: "content" if p in content else "destination" if p in destinations
            else "control" for p in parameters}


def _handler(runtime: FunctionsRuntime, environment: TaskEnvironment, name: str,
             labels: Any = None) -> Any:
    label = labels or field_labels

    async def run(arguments: dict[str, Any], ctx: ToolContext) -> ToolOutput:
        # AgentDojo's own runtime: its argument validation, its dependency injection (the
        # environment's inbox, calendar, account...), its error text.
        result, error = runtime.run_function(environment, name, arguments)
        if error is not None:
            return ToolOutput(f"Error: {error}", is_error=True)
        return ToolOutput(tool_result_to_str(result),
                          fields=label(result, environment, name))

    return run
