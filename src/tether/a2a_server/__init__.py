"""tether as an A2A server: an endpoint that publishes an agent card and takes A2A tasks,
each run by a tether agent, built with the official SDK (``a2a-sdk``, the ``a2a`` extra).

``build_a2a_app(make_agent, store=..., url=...)`` returns a Starlette app (and
``build_a2a_routes`` its routes, to mount in another app: ``tether serve``);
``app_from_config(workspace, url)`` builds both from the workspace's tether.toml.

The rules, each the same as a run's anywhere else:

- An inbound message is the run's prompt, but a remote party wrote it: it is outside text
  (shown to the model as data, tainting the conversation, never traced as the user's
  words), unless the caller presents a bearer token the configuration lists as trusted
  (``[a2a_server] trusted_tokens_env``); then it is the user's words.
- A call that needs approval is the owner's to decide, never the caller's: the run pauses
  (a ``DeferringApprover``), is stored as any paused session is, and the task goes
  ``input-required``; the owner decides with ``tether sessions resume ID --allow CALL``,
  and the task completes with that run's answer. A message the caller sends meanwhile is
  no decision: it is answered that the task waits for the owner.
- The answer goes to the caller, so it is a send: an untrusted caller's run that read
  private data gets its answer withheld (the owner reads it in the session).
- Task events stream: working, each tool call, input-required, the answer as an artifact.
"""

from __future__ import annotations

from tether.a2a_server.app import app_from_config, build_a2a_app, build_a2a_routes

__all__ = ["app_from_config", "build_a2a_app", "build_a2a_routes"]
