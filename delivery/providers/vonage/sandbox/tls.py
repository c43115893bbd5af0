"""HTTPS for the Vonage sandbox. The official SDK builds every URL as ``https://{rest_host}{path}``
(vonage_http_client/http_client.py, ``make_request``) and mounts its adapter on ``https://`` only, so the
sandbox cannot be plain HTTP. At start it makes a throwaway CA and a server certificate for its host
(``trustme``; nothing is fetched) and writes the CA to a PEM file: a client trusts it with requests'
``verify=<ca file>`` or ``REQUESTS_CA_BUNDLE``. Must not import Django.
"""

from __future__ import annotations

import os
import ssl
import tempfile


def _identities(host: str) -> list[str]:
    """The names and addresses the certificate is valid for: the host it binds and the local ones (a
    host bound on every address is reached by those)."""
    names = {"localhost", "127.0.0.1", "::1"}
    if host not in ("0.0.0.0", "::", ""):
        names.add(host)
    return sorted(names)


def server_context(host: str, ca_file: str | None = None) -> tuple[ssl.SSLContext, str]:
    """An SSL context serving a fresh certificate for ``host`` (and localhost), and the path of the CA
    that signed it (``ca_file``, or a new file in the temporary directory)."""
    import trustme  # a dev dependency: only the sandbox needs it

    ca = trustme.CA(organization_name="smsgw Vonage sandbox")
    cert = ca.issue_cert(*_identities(host))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(context)
    if ca_file is None:
        fd, ca_file = tempfile.mkstemp(prefix="vonage-sandbox-ca-", suffix=".pem")
        os.close(fd)
    ca.cert_pem.write_to_path(ca_file)
    return context, ca_file
