"""Remote agents over the Agent2Agent protocol (A2A), as sub-agents of a run.

``A2AAgent`` (``tether.a2a.remote``) names a remote agent; given to
``Agent(subagents=[...])`` (or as ``[[a2a]]`` in tether.toml) it becomes one tool the model
can delegate to, like a ``SubagentProfile``. Its answer is outside text unless it parses as
the declared ``answer_shape``. The official ``a2a-sdk`` (the ``a2a`` extra) is imported only
when a remote agent is called, so ``import tether`` never loads it. The server side, an
A2A endpoint running a tether agent, is ``tether.a2a_server``.
"""

from __future__ import annotations

from tether.a2a.remote import A2AAgent

__all__ = ["A2AAgent"]
