import pytest
from rest_framework.test import APIClient

from tests.factories import tenant_with_key


@pytest.fixture
def tenant_and_key(db):
    return tenant_with_key("acme")


@pytest.fixture
def api(tenant_and_key):
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {tenant_and_key[1]}")
    client.tenant = tenant_and_key[0]
    return client
