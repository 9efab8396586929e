"""External systems registered for the client_credentials grant."""

from models import OAuthClient
from shopapi.web.listing import list_response
from shopapi.web.responses import created


def represent(client: OAuthClient) -> dict:
    return {
        "id": client.id,
        "name": client.name,
        "client_id": client.client_id,
        "scopes": client.scopes.split(),
        "created_at": client.created_at,
        "updated_at": client.updated_at,
    }


def list_oauth_clients(**params):
    return list_response(OAuthClient, OAuthClient.select(), params, represent)


def register_oauth_client(body):
    client, secret = OAuthClient.register(body["name"], body["scopes"])
    return created({**represent(client), "client_secret": secret}, client.id)


def get_oauth_client(id):
    return represent(OAuthClient.get_by_id(id))


def delete_oauth_client(id):
    OAuthClient.get_by_id(id).delete_instance()
