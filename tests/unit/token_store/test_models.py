"""token_store/models.py: the records' JSON forms, including the shapes stored records already have."""

from __future__ import annotations

import json

from tests.support.store_contract import make_state
from token_store import KeyRing, codec
from token_store.models import OAuthState


def test_oauth_state_round_trips_through_json() -> None:
    state = make_state()
    assert OAuthState.from_json(state.to_json()) == state


def test_a_sealed_state_with_an_extra_member_still_opens() -> None:
    state = make_state()
    stored = json.loads(state.to_json())
    stored["extra"] = {}
    assert "extra" not in json.loads(state.to_json())
    keyring = KeyRing([("k1", KeyRing.generate_key())])
    key = codec.lookup_key(state.state)
    blob = keyring.seal(json.dumps(stored).encode(), codec.state_associated_data(key))
    assert codec.open_state(keyring, key, blob) == state
