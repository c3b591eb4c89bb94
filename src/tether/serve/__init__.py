"""`tether serve`: an AG-UI endpoint and a local web page where approvals show their reasons.

The ``web`` extra's (starlette, uvicorn, ag-ui-protocol): nothing imports this package but
the command that serves (``tether.cli.serve``), so ``import tether`` stays light.

- ``app``: ``build_app``, the Starlette application (routes another module may extend);
- ``security``: the door (token, Host, Origin, JSON; the page's headers; ``--host``);
- ``runs``: the runs, one per session at a time, their approvals deferred and stored;
- ``asking``: who a run asks (its own approver: an MCP server's request for input reaches
  the page watching that run, and no other);
- ``agui``: tether's events as AG-UI events, and what an input may say;
- ``reasons``: why a paused call is asked (each value's provenance, taint, diff);
- ``history``: stored sessions as the page shows them;
- ``server``: serving it with uvicorn, stopping cleanly.
"""
