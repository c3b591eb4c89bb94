"""AgentDyn's tools (shopping, github, dailylife) declared by AgentDojo's written rule.

AgentDyn (github.com/SaFo-Lab/AgentDyn) is a fork of AgentDojo with three more suites. Its
tools are declared here, once per tool name, by the same rule as AgentDojo's (the top of
``agentdojo_tools.py``: capabilities from what a tool returns and does, parameter roles,
field labels), never per task. What the rule says of the tools AgentDojo lacks:

- a **web page** (``browse_webpage``, ``input_to_webpage``, a download by URL) is outside
  text and a request out: untrusted input and a send to its URL. A form's values are
  content; the URL is the destination.
- a **local file system** (``list_directory``, ``read_file``) holds files others wrote (a
  download, an attachment, a clone): private and untrusted. Creating a file or a directory
  is neither; deleting or moving one is destructive.
- a **shop**: listings, orders, the cart and invoices carry what sellers write (product
  names, descriptions): untrusted. A checkout is a payment (a send, its products the
  control values); a refund, a removal or clearing the cart changes what exists.
- **GitHub**: a repository's information and a clone carry what others wrote; a push, an
  issue, a star, an invitation, an added SSH key and a transfer leave the user's control
  (a transfer's new owner, an invited collaborator and an added key are the
  destinations: each is someone given access); a deletion, a pull over local files, an
  unstar and a removed key change what exists.
- an **account** (login, a one-time password, a password or profile update): the values
  written are content (a password, a profile's fields, a one-time password: a value the
  call carries, not a name of what it acts on).
- **profiles**: the account's own user information is the user's; its password, ID,
  passport and bank numbers are secret.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import agentdojo_tools as _dojo  # loaded by benchmarks/agentdojo.py as a sibling
from agentdojo.functions_runtime import TaskEnvironment

from tether.fields import Marker, Secret, WrittenBy
from tether.messages import FieldLabel
from tether.trust import Capabilities

_P = Capabilities(private_data=True)
_U = Capabilities(untrusted_input=True)
_S = Capabilities(external_send=True)
_D = Capabilities(destructive=True)
_NONE = Capabilities()

TOOL_CAPABILITIES: Mapping[str, Capabilities] = {
    # --- bank ----------------------------------------------------------------------------
    "send_money": _S,
    "get_balance": _P,
    "verify_transaction": _NONE,  # completes the user's own pending transfer
    # --- shop ----------------------------------------------------------------------------
    "login_shopping_account": _NONE,
    "verify_shopping_account": _NONE,
    "get_shopping_account_user_information": _P,
    "update_shopping_account_password": _D,
    "update_shopping_account_user_info": _P | _D,  # returns the updated profile
    "get_shopping_linked_unread_emails": _P | _U,
    "get_shopping_linked_received_emails": _P | _U,
    "search_product": _U,  # sellers write listings and reviews
    "view_order_history": _P | _U,
    "get_invoice": _P | _U,
    "refund_order": _D,
    "view_cart": _P | _U,
    "cart_add_product": _NONE,
    "cart_remove_product": _D,
    "clear_cart": _D,
    "cart_total": _P,
    "checkout_selected_cart": _S,  # a payment
    "view_available_discounts": _P,
    # --- mail ----------------------------------------------------------------------------
    "send_email": _S,
    "get_unread_emails": _P | _U,
    "get_received_emails": _P | _U,
    "get_sent_emails": _P | _U,
    "search_emails": _P | _U,
    "delete_email": _D,
    # --- web and local files ----------------------------------------------------------------
    "browse_webpage": _U | _S,
    "input_to_webpage": _U | _S,
    "download_file_through_url": _U | _S,
    "download_file_through_id": _P | _U,  # an attachment of a received email
    "list_directory": _P | _U,
    "create_file": _NONE,
    "create_dir": _NONE,
    "read_file": _P | _U,
    "delete_node": _D,
    "copy_node": _NONE,
    "move_node": _D,
    # --- calendar (as AgentDojo's) -------------------------------------------------------------
    "get_current_day": _NONE,
    "search_calendar_events": _P | _U,
    "get_day_calendar_events": _P | _U,
    "create_calendar_event": _S,
    "cancel_calendar_event": _D | _S,
    "reschedule_calendar_event": _P | _U | _D | _S,
    "add_calendar_event_participants": _P | _U | _D | _S,
    # --- GitHub ----------------------------------------------------------------------------
    "git_create_repo": _NONE,
    "git_delete_repo": _D,
    "git_transfer_repo_ownership": _D | _S,
    "git_clone": _P | _U,
    "git_invite_collaborators": _S,
    "git_push": _D | _S,
    "git_pull": _U | _D,
    "git_issue": _S,
    "git_star": _S,
    "git_unstar": _D,
    "get_github_linked_unread_emails": _P | _U,
    "get_logged_in_github_user_information": _P,
    "get_github_account_user_information": _U,
    "get_github_repository_information": _U,
    "git_get_linked_ssh_keys": _P,
    "git_add_ssh_key": _S,  # gives the key's holder access to the account
    "git_delete_ssh_key": _D,
    "login_github_account": _NONE,
    "update_github_account_password": _D,
    "verify_github_account": _NONE,
}

CONTENT_PARAMS: Mapping[str, tuple[str, ...]] = {
    "send_money": ("subject", "amount", "date"),
    "verify_transaction": ("otp",),
    "login_shopping_account": ("username", "password"),
    "verify_shopping_account": ("otp",),
    "update_shopping_account_password": ("password",),
    "update_shopping_account_user_info": (
        "first_name", "last_name", "id_number", "email", "phone_number", "address",
        "passport_number", "bank_account_number"),
    "cart_add_product": ("quantity",),
    "send_email": ("subject", "body"),
    "input_to_webpage": ("input_values",),
    "create_file": ("content",),
    "create_calendar_event": ("title", "description", "location", "start_time", "end_time"),
    "reschedule_calendar_event": ("new_start_time", "new_end_time"),
    "git_issue": ("title", "comment_body"),
    "login_github_account": ("username", "password"),
    "update_github_account_password": ("password",),
    "verify_github_account": ("otp",),
}

DESTINATION_PARAMS: Mapping[str, tuple[str, ...]] = {
    "send_money": ("recipient",),
    "send_email": ("recipients", "cc", "bcc"),
    "browse_webpage": ("url",),
    "input_to_webpage": ("url",),
    "download_file_through_url": ("url",),
    "create_calendar_event": ("participants",),
    "add_calendar_event_participants": ("participants",),
    "git_transfer_repo_ownership": ("new_owner_username", "new_owner_email"),
    "git_invite_collaborators": ("collaborator_email",),
    "git_issue": ("repo_name",),
    "git_star": ("repo_name",),
    "git_add_ssh_key": ("ssh_key",),
}

_USER: tuple[Marker, ...] = (WrittenBy.user,)
_SECRET: tuple[Marker, ...] = (WrittenBy.user, Secret)

PROFILES: dict[str, dict[str, tuple[Marker, ...]]] = {
    "get_shopping_account_user_information": {
        "Email": _USER, "Username": _USER, "Password": _SECRET, "First Name": _USER,
        "Last Name": _USER, "ID Number": _SECRET, "Phone Number": _USER, "Address": _USER,
        "Passport Number": _SECRET, "Bank Account Number": _SECRET,
        "Bank Account Password": _SECRET},
    "get_logged_in_github_user_information": {
        "email": _USER, "username": _USER, "password": _SECRET},
}


def field_labels(result: Any, environment: TaskEnvironment,
                 tool: str = "") -> tuple[FieldLabel, ...]:
    """The labelled values of ``tool``'s ``result``: the profiles above, and AgentDojo's
    record rule for the records both share (an email's and an event's id, minted by the
    service)."""
    profile = PROFILES.get(tool)
    if profile is not None and isinstance(result, dict):
        return tuple(FieldLabel(f".{key}", str(value), "user", Secret in profile[key])
                     for key, value in result.items()
                     if key in profile and isinstance(value, str | int) and str(value))
    labels: tuple[FieldLabel, ...] = _dojo.field_labels(result, environment, tool)
    return labels


AGENTDYN = _dojo.Declarations(TOOL_CAPABILITIES, CONTENT_PARAMS, DESTINATION_PARAMS,
                              frozenset(), PROFILES, field_labels)
