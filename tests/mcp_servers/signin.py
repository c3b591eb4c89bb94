"""An MCP server over streamable HTTP that wants OAuth 2.1, with its own authorization
server (the SDK's server-side auth: protected resource metadata, authorization server
metadata, dynamic client registration, /authorize, /token with PKCE and refresh), on
127.0.0.1. Prints its port once it listens.

Its authorization endpoint signs the browser in at once (no login page): following the
authorization URL redirects to the client's redirect URI with a code. Tokens are bound to
the resource the client names (RFC 8707). Its one tool, ``whoami``, says which client the
token belongs to: how many tokens it was issued and had refreshed.

``--lifetime N`` gives access tokens N seconds.
"""

from __future__ import annotations

import argparse
import secrets
import time

from _serve import listening, serve_on
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import (
    AccessToken,
    AuthorizationCode,
    AuthorizationParams,
    RefreshToken,
    construct_redirect_uri,
)
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

parser = argparse.ArgumentParser()
parser.add_argument("--lifetime", type=int, default=3600)
options = parser.parse_args()

sock = listening()
BASE = f"http://127.0.0.1:{sock.getsockname()[1]}"
counts: dict[str, dict[str, int]] = {}  # per client: tokens issued, refreshed


def count(client_id: str, what: str) -> None:
    mine = counts.setdefault(client_id, {"issued": 0, "refreshed": 0})
    mine[what] += 1


class Memory:
    """Clients, codes and tokens in memory."""

    def __init__(self) -> None:
        self.clients: dict[str, OAuthClientInformationFull] = {}
        self.codes: dict[str, AuthorizationCode] = {}
        self.refresh: dict[str, RefreshToken] = {}
        self.access: dict[str, AccessToken] = {}

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.clients.get(client_id)

    async def register_client(self, client_info: OAuthClientInformationFull) -> None:
        assert client_info.client_id is not None
        self.clients[client_info.client_id] = client_info

    async def authorize(self, client: OAuthClientInformationFull,
                        params: AuthorizationParams) -> str:
        code = secrets.token_urlsafe(24)
        self.codes[code] = AuthorizationCode(
            code=code, scopes=params.scopes or [], expires_at=time.time() + 300,
            client_id=client.client_id or "", code_challenge=params.code_challenge,
            redirect_uri=params.redirect_uri,
            redirect_uri_provided_explicitly=params.redirect_uri_provided_explicitly,
            resource=params.resource)
        return construct_redirect_uri(str(params.redirect_uri), code=code, state=params.state)

    async def load_authorization_code(self, client: OAuthClientInformationFull,
                                      authorization_code: str) -> AuthorizationCode | None:
        return self.codes.get(authorization_code)

    def _tokens(self, client_id: str, scopes: list[str], resource: str | None) -> OAuthToken:
        access, refresh = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        self.access[access] = AccessToken(token=access, client_id=client_id, scopes=scopes,
                                          expires_at=int(time.time()) + options.lifetime,
                                          resource=resource)
        self.refresh[refresh] = RefreshToken(token=refresh, client_id=client_id,
                                             scopes=scopes, resource=resource)
        return OAuthToken(access_token=access, expires_in=options.lifetime,
                          refresh_token=refresh, scope=" ".join(scopes) or None)

    async def exchange_authorization_code(self, client: OAuthClientInformationFull,
                                          authorization_code: AuthorizationCode) -> OAuthToken:
        del self.codes[authorization_code.code]
        count(authorization_code.client_id, "issued")
        return self._tokens(authorization_code.client_id, authorization_code.scopes,
                            authorization_code.resource)

    async def load_refresh_token(self, client: OAuthClientInformationFull,
                                 refresh_token: str) -> RefreshToken | None:
        return self.refresh.get(refresh_token)

    async def exchange_refresh_token(self, client: OAuthClientInformationFull,
                                     refresh_token: RefreshToken,
                                     scopes: list[str]) -> OAuthToken:
        del self.refresh[refresh_token.token]
        count(refresh_token.client_id, "refreshed")
        return self._tokens(refresh_token.client_id, scopes or refresh_token.scopes,
                            refresh_token.resource)

    async def load_access_token(self, token: str) -> AccessToken | None:
        found = self.access.get(token)
        if found is None or (found.expires_at is not None and found.expires_at < time.time()):
            return None
        return found

    async def revoke_token(self, token: AccessToken | RefreshToken) -> None:
        self.access.pop(token.token, None)
        self.refresh.pop(token.token, None)


server = MCPServer(
    "signin", auth_server_provider=Memory(),  # type: ignore[arg-type]  # the SDK's protocol, loosely
    auth=AuthSettings(issuer_url=BASE,  # type: ignore[arg-type]
                      resource_server_url=f"{BASE}/mcp",  # type: ignore[arg-type]
                      client_registration_options=ClientRegistrationOptions(enabled=True),
                      validate_token_resource=True))


@server.tool()
async def whoami(ctx: Context) -> str:
    """The tokens issued to and refreshed for the client calling."""
    token = get_access_token()
    mine = counts.get(token.client_id if token else "", {"issued": 0, "refreshed": 0})
    return f"signed in; issued {mine['issued']}, refreshed {mine['refreshed']}"


if __name__ == "__main__":
    print(sock.getsockname()[1], flush=True)
    serve_on(sock, server.streamable_http_app())
