"""What every HTTP adapter shares, one idea a module (import each name from its module).

- ``transport``: ``HTTPTransport`` (an httpx client per event loop; a POST retried before
  its response starts), ``Timeouts``, ``resolve_api_key``;
- ``retry``: ``RetryPolicy`` (the one policy for every adapter), ``RetryRules`` (what a
  wire's codec declares beyond it: its server's quirks, as one frozen value),
  ``RetryBudget`` (one request's attempts, whichever layer retries; the one reader of the
  rules) and ``retry_before_first_chunk`` (a stream re-opened when it fails before any
  content);
- ``decoders``: an answer's stream read as server-sent events or newline-delimited JSON,
  split into lines where the spec splits them, its transport failures typed;
- ``errors``: tether's typed error for an httpx failure, a stream cut short, a field of
  the wrong JSON type, and the wait a ``Retry-After`` names;
- ``bodies``: bounded reads (``MAX_RESPONSE_BYTES`` of one answer, JSON nested at most
  ``MAX_JSON_DEPTH`` deep).

Everything a server sends is hostile input: httpx errors never leave this package untyped.
What an error answer means is ``tether.providers.failures``'s to say.
"""
