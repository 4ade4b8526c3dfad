#!/usr/bin/env python3
"""Mutation check for the security checks of docs/threat-model.md.

Every mitigation needs a test that fails if it is removed. This script removes each security check
in turn, runs the tests selected for that check (`pytest -x -q -p no:cacheprovider`, env
`CI=true`), records which test failed, restores the file and prints a table:

    check -> file:line (function) -> the test that failed (or NOT CAUGHT)

Where: a marker at the check in the source, a comment on the line to mutate or on the line directly
above it, `# mutant: <id>` (`-- mutant: <id>` in Lua). The table below (CHECKS) holds only the id,
the tests that must catch the mutant, what it removes and how many markers carry the id; a check
renamed or moved takes its marker along, and the table does not change.

How: the mutation follows from the marked statement (see OPERATORS): `if <cond>:` becomes
`if False:`, a call statement `pass`, a `return` of a check `return True` (`-> bool`) or its first
argument, a `with` block its plain body, an operand of `and`/`or` or an item of a list is left out,
a configuration line (nginx, YAML, Lua) is deleted with its block. A marker names an operator only
where that default does not remove the check: `# mutant: <id> true`, `... drop 1`, or a text
substitution within the marked statement, `# mutant: <id> "old" -> "new"`. Written here rather
than with mutmut or cosmic-ray: those apply every operator they know everywhere and report the
survivors; this check removes one named check at a time, in Python, nginx, YAML and Lua alike,
and requires the tests named for it to fail.

Before mutating anything it checks that every id of the table has its markers, every marker an
id, and every marked statement an operator whose mutant compiles (exit 2 otherwise), then runs
every selected test once unmutated (the baseline; skip with --no-baseline): a test that already
fails would otherwise count as a catch. It exits non-zero when any check is not caught.

Safety: a mutated file never stays behind. Each file is restored in a `finally` (also on Ctrl-C,
SIGTERM or SIGHUP) and its SHA-256 is compared with the original; a mismatch is reported loudly
(exit 3). The run refuses to start when a file it would mutate has uncommitted changes (read with
`git status`, which changes nothing), unless --force. With --copy, the mutations are applied to a
throwaway copy of the work tree in a temporary directory and the work tree is never written, which
is the mode to use while other people run tests in the same checkout.

    .venv/bin/python scripts/mutation_check.py            # all checks (about 7 minutes on 2 cores)
    .venv/bin/python scripts/mutation_check.py --list     # id, file:line, function, what it removes
    .venv/bin/python scripts/mutation_check.py --only bearer.typ_at_jwt --only connect.same_user
    .venv/bin/python scripts/mutation_check.py --copy     # never writes the work tree

`--only` takes an id or the name of the function (or `Class.method`) a marker sits in.

Exit codes: 0 every check caught; 1 some check not caught (or its run errored or timed out);
2 refused or invalid table or markers (nothing was mutated); 3 a file could not be restored.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import dataclasses
import hashlib
import io
import itertools
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tokenize
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------
# The table. One entry per check: the smallest test selection that catches its removal (fast unit
# tests where they exist; end-to-end tests only where nothing else covers the check). Where the
# check is, and how it is removed, is said by its marker in the source.
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Check:
    id: str
    tests: tuple[str, ...]  # pytest node ids or files
    removes: str  # what the mutant disables, in a few words
    # Markers carrying this id: more than 1 where one check is written in several places.
    markers: int = 1
    # Runs of the selection while mutated; more than 1 only where the catching test is a race that
    # notices the mutant with some probability per run. Caught as soon as one run fails.
    attempts: int = 1


def check(id: str, tests: Sequence[str], removes: str, markers: int = 1, attempts: int = 1) -> Check:
    return Check(id, tuple(tests), removes, markers, attempts)


E2E_FLOW = "tests/e2e/test_connect_flow.py"
E2E_HARD = "tests/e2e/test_connect_hardening.py"
E2E_CHROMIUM = "tests/e2e/test_chromium.py"
E2E_STATE = "tests/e2e/test_request_state.py"
SEC_BROWSER = "tests/security/test_browser.py"
BEARER = "tests/unit/service/mcp/test_bearer.py"
CONTRACT = "tests/integration/token_store/test_store_contract.py"
STORE_COPY = "tests/integration/token_store/test_store_copy.py"
UNIT_CHECKS = "tests/unit/service/flow/test_security_checks.py"
UNIT_ROUTES = "tests/unit/connect_routes/test_connect.py"
UNIT_ACCOUNTS = "tests/unit/service/mcp/test_account_choice.py"
DEPLOY_KIT_LIMITS = (
    "tests/integration/test_deploy_kit.py::"
    "test_nginx_limits_each_address_only_for_requests_without_a_bearer_token"
)
GATEWAY_ADDRESSES = "tests/unit/service/providers/test_addresses.py"
GATEWAY_RESOURCE = "tests/unit/service/providers/test_protected_resource.py"
GATEWAY_DISCOVERY = "tests/unit/service/providers/test_mcp_downstream.py"
GATEWAY_UNIT = "tests/unit/service/mcp/gateway"


CHECKS: tuple[Check, ...] = (
    check(
        "connect.same_user",
        [f"{E2E_FLOW}::test_another_user_gets_403_and_nothing_is_stored"],
        "browser user == elicitation user (GET/POST /connect and the callback)",
    ),
    check(
        "callback.same_browser",
        [f"{E2E_FLOW}::test_callback_in_another_browser_of_the_same_user_is_refused"],
        "callback only in the browser that passed POST /connect",
    ),
    check(
        "callback.redirect_uri_of_provider",
        [f"{E2E_HARD}::test_callback_on_another_providers_redirect_uri_is_a_mixup"],
        "one redirect URI per provider (mix-up without iss)",
    ),
    check(
        "callback.rfc9207_issuer",
        [f"{E2E_FLOW}::test_rfc9207_issuer_mismatch_refuses_the_code"],
        "RFC 9207 iss compared before the code is redeemed",
    ),
    check(
        "connect.csrf_on_posts",
        [
            f"{E2E_HARD}::test_confirmation_post_without_csrf_leaves_the_link_pending",
            f"{SEC_BROWSER}::test_csrf_on_api_key_entry",
            f"{SEC_BROWSER}::test_csrf_on_connect_cancel",
        ],
        "CSRF token on POST /connect, /connect/api-key and /connect/cancel, before anything else",
    ),
    check(
        "connect.csrf_on_cancel",
        [f"{UNIT_ROUTES}::test_cancel_declines_the_link_after_the_checks_of_post_connect"],
        "CSRF token on POST /connect/cancel (cancel without the checks every connect POST makes first)",
    ),
    check(
        "connect.same_user_on_cancel",
        [f"{UNIT_ROUTES}::test_cancel_declines_the_link_after_the_checks_of_post_connect"],
        "same user on POST /connect/cancel (the link checked against its own owner instead)",
    ),
    check(
        "connect.link_pending",
        [
            f"{UNIT_ROUTES}::test_a_used_link_answers_409_on_get_and_post",
            "tests/security/test_ids_and_states.py::test_link_reused_after_completion_is_refused",
        ],
        "GET/POST /connect only while the elicitation is pending (single use of a link)",
    ),
    check(
        "connect.link_opens_once",
        [f"{UNIT_ROUTES}::test_a_link_opens_once_even_when_two_visits_passed_the_check"],
        "POST /connect: PENDING->OPENED compare-and-set result honoured (racing POSTs)",
    ),
    check(
        "callback.single_use_state",
        [f"{E2E_FLOW}::test_a_replayed_callback_never_exchanges_the_code_again"],
        "callback consumes the OAuth state (single use) before any other check",
    ),
    check(
        "callback.repeat_of_same_request",
        [
            f"{UNIT_CHECKS}::test_require_repeat_of_same_callback",
            "tests/security/test_ids_and_states.py::"
            "test_a_replayed_callback_never_redeems_again_and_shows_the_first_outcome_only_to_its_browser",
        ],
        "a callback whose state is gone shows the first outcome only to the same request, same browser",
    ),
    check(
        "connect.opaque_ids",
        [f"{UNIT_CHECKS}::test_require_opaque_id", f"{UNIT_ROUTES}::test_malformed_ids_get_400"],
        "elicitation ids and states must have the shape we mint",
    ),
    check(
        "login.safe_next",
        [f"{SEC_BROWSER}::test_login_next_cannot_leave_the_site"],
        "post-login redirect only to our own paths (open redirect)",
    ),
    check(
        "login.issuer",
        ["tests/unit/connect_routes/test_login.py::test_login_refuses_an_id_token_from_another_issuer"],
        "browser login only with an ID token from auth_issuer",
    ),
    check(
        "session.rotated_on_login",
        [f"{SEC_BROWSER}::test_login_rotates_a_planted_session"],
        "a login clears everything from before it",
    ),
    check(
        "session.absolute_lifetime",
        [f"{SEC_BROWSER}::test_session_past_its_absolute_lifetime_is_signed_out"],
        "absolute session lifetime from login_at",
    ),
    check(
        "session.samesite_lax",
        [f"{SEC_BROWSER}::test_session_cookie_attributes_on_loopback_http"],
        "SameSite=Lax on the session cookie",
    ),
    check(
        "session.host_prefix",
        [f"{SEC_BROWSER}::test_session_cookie_is_host_prefixed_and_secure_under_https"],
        "__Host- cookie name under https",
    ),
    check(
        "session.secure_flag",
        [f"{SEC_BROWSER}::test_session_cookie_is_host_prefixed_and_secure_under_https"],
        "Secure on the session cookie under https",
    ),
    check(
        "csrf.token_compared",
        [f"{E2E_HARD}::test_confirmation_post_without_csrf_leaves_the_link_pending"],
        "the submitted CSRF token compared with the session's",
        markers=2,
    ),
    check(
        "connections.csrf",
        [f"{SEC_BROWSER}::test_csrf_on_disconnect", f"{SEC_BROWSER}::test_csrf_on_default_account"],
        "CSRF token on POST /connections/disconnect and /connections/default",
    ),
    check(
        "headers.security_headers",
        [
            "tests/unit/service/http/test_request_pass.py::test_every_response_carries_one_request_id_and_the_security_headers",
            f"{E2E_CHROMIUM}::test_pages_send_security_headers",
        ],
        "CSP, frame-ancestors, no-referrer, no-store, nosniff on every response",
    ),
    check(
        "bearer.algorithm_allow_list",
        [f"{BEARER}::test_disallowed_algorithm_is_refused_before_any_fetch"],
        "alg from the allow-list before any key work",
    ),
    check(
        "bearer.forbidden_headers",
        [f"{BEARER}::test_key_carrying_headers_are_rejected_without_fetching"],
        "jku/jwk/x5u/x5c refused",
    ),
    check("bearer.typ_at_jwt", [f"{BEARER}::test_invalid_tokens_are_rejected"], "typ at+jwt (RFC 9068)"),
    check("bearer.audience", [f"{BEARER}::test_invalid_tokens_are_rejected"], "aud = <public_url>/mcp"),
    check("bearer.issuer", [f"{BEARER}::test_invalid_tokens_are_rejected"], "iss = auth_issuer"),
    check(
        "bearer.max_token_length",
        [
            f"{BEARER}::test_oversized_token_is_refused_before_any_fetch",
            f"{BEARER}::test_garbage_longer_than_the_limit_is_refused_before_any_fetch",
        ],
        "token length bounded before any JOSE work",
    ),
    check(
        "bearer.sub",
        [f"{BEARER}::test_invalid_tokens_are_rejected"],
        "sub a non-empty string of at most 255 characters",
    ),
    check(
        "broker.single_use_request_state",
        [f"{E2E_STATE}::test_request_state_is_single_use"],
        "requestState nonce taken once",
    ),
    check(
        "broker.request_state_for_provider",
        [
            "tests/unit/service/mcp/test_broker.py::test_request_state_for_another_provider_is_refused_before_its_nonce_is_used"
        ],
        "requestState names the provider of this call",
    ),
    check(
        "broker.offered_account",
        [
            f"{UNIT_ACCOUNTS}::test_an_answer_naming_another_users_account_is_refused",
            f"{UNIT_ACCOUNTS}::test_an_answer_that_was_not_offered_is_refused",
            f"{UNIT_ACCOUNTS}::test_modern_account_answer_is_checked_against_the_callers_accounts",
        ],
        "a form answer is one of the caller's accounts offered (or 'connect another')",
    ),
    check(
        "revision.form_capability",
        [
            f"{UNIT_ACCOUNTS}::test_supports_form_elicitation",
            f"{UNIT_ACCOUNTS}::test_without_form_support_the_most_recent_is_used_and_named",
        ],
        "no form-mode elicitation to a client that did not declare it",
    ),
    check(
        "broker.request_state_kind",
        [f"{UNIT_ACCOUNTS}::test_unknown_kind_is_an_invalid_state"],
        "a requestState names a question this server asks (connect or account)",
    ),
    check(
        "broker.elicitation_of_same_user",
        [
            f"{UNIT_CHECKS}::test_elicitation_of_same_user",
            "tests/unit/service/mcp/revisions/test_v2026_07_28.py::test_another_users_flow_is_no_answer_to_a_retry",
        ],
        "a 2026-07-28 retry counts only the caller's own flow",
    ),
    check(
        "broker.one_open_account_question",
        [
            f"{UNIT_ACCOUNTS}::test_modern_asking_again_replaces_the_open_questions_nonce",
            "tests/security/test_abuse.py::test_flood_of_account_questions_holds_one_nonce_per_user",
        ],
        "one live nonce per user's open 'which account?' at a provider",
    ),
    check(
        "broker.request_state_ttl",
        ["tests/security/test_request_state.py::test_request_state_lives_as_long_as_the_flow_it_resumes"],
        "requestState sealed for elicitation_ttl (not the SDK's 600 s)",
    ),
    check(
        "mcp_errors.store_unavailable",
        ["tests/e2e/test_store_faults.py::test_store_down_fails_closed_and_recovers"],
        "store failure -> JSON-RPC -32603 (fail closed)",
    ),
    check(
        "revision.url_capability",
        [f"{E2E_FLOW}::test_client_without_url_mode_gets_a_fallback_result"],
        "URL mode only for clients that declared elicitation.url",
    ),
    check(
        "completion.session_match",
        [
            "tests/unit/service/mcp/completion/test_hub.py::test_a_record_naming_another_session_is_not_delivered"
        ],
        "completion only to the MCP session named by the record",
    ),
    check(
        "sse_resumption.store_per_session",
        [
            "tests/unit/service/mcp/sdk/test_sse_resumption.py::test_a_dropped_stream_is_replayed_from_its_last_event_id_within_its_own_session"
        ],
        "SSE replay only within the session (and user) whose stream it was",
    ),
    check(
        "broker.resume_named_account",
        [
            "tests/unit/service/mcp/test_broker_resume_decline.py::test_a_retry_naming_an_account_the_flow_did_not_connect_asks_again"
        ],
        "a 2026-07-28 retry answers only with the account the tool named",
    ),
    check(
        "provider_session.own_url",
        ["tests/unit/service/mcp/test_provider_session.py::test_the_token_never_goes_to_another_host"],
        "a provider token goes only to that provider's own hosts",
    ),
    check(
        "pagination.next_page_same_origin",
        [
            "tests/unit/service/mcp/test_provider_session.py::test_a_next_page_on_another_host_is_refused_before_anything_is_sent_there"
        ],
        "a next-page link is followed, with the token, only on the origin of the page that named it",
    ),
    check(
        "api.redact_connection_secrets",
        [
            "tests/unit/service/providers/test_api.py::test_the_providers_message_never_carries_the_token_and_stays_short"
        ],
        "a provider's error message reaches a tool error without the connection's tokens",
    ),
    check(
        "settings.https_outside_loopback",
        ["tests/unit/service/test_settings.py::test_plain_http_is_refused_outside_loopback"],
        "public_url https unless loopback",
    ),
    check(
        "redis.tls_unless_loopback",
        [
            "tests/unit/token_store/backends/redis/test_plaintext.py::test_plain_text_elsewhere_is_refused_unless_allowed_and_tls_goes_anywhere",
            "tests/unit/service/test_settings.py::test_plain_redis_is_refused_outside_loopback",
            "tests/security/test_leakage.py::test_serve_refuses_plain_redis_to_another_host",
            "tests/integration/token_store/backends/redis/test_plaintext.py",
        ],
        "plain-text Redis only to loopback unless MCPUC_ALLOW_PLAINTEXT_REDIS, on every connection",
    ),
    check(
        "settings.no_hs_or_none",
        ["tests/unit/service/test_settings.py::test_validate_rejects"],
        "auth_algorithms never none or HS*",
    ),
    check(
        "providers.https_endpoints",
        [
            "tests/unit/service/providers/test_catalogue.py::test_plain_http_only_on_loopback_unless_explicitly_allowed"
        ],
        "provider endpoints https unless loopback or insecure_http",
    ),
    check(
        "providers.discovery_s256",
        ["tests/unit/service/providers/test_catalogue.py::test_discovery_refuses_a_provider_without_s256"],
        "discovery refuses a provider without PKCE S256",
    ),
    check(
        "redaction.secrets_redacted",
        ["tests/unit/service/observability/test_redaction.py::test_redact_removes_secrets"],
        "secrets redacted from every log line",
    ),
    check(
        "redaction.url_shape_only",
        [
            "tests/unit/service/observability/test_redaction.py::test_outbound_urls_are_logged_as_scheme_host_and_path_shape_only"
        ],
        "a logged URL keeps only scheme, host and path shape",
    ),
    check("provider_oauth.pkce_s256", [f"{E2E_FLOW}::test_legacy_full_flow"], "PKCE S256 toward providers"),
    check(
        "crypto.associated_data",
        ["tests/unit/token_store/test_crypto.py::test_wrong_associated_data_fails"],
        "AEAD seals and opens with the record's associated data",
        markers=2,
    ),
    check(
        "store.connection_binding",
        [f"{CONTRACT}::test_record_moved_under_another_key_reads_as_absent"],
        "associated data = (iss, sub, provider, account) of the record",
    ),
    check(
        "store.transition_table",
        [
            f"{CONTRACT}::test_the_store_makes_exactly_the_transitions_of_the_status_machine[sqlite]",
            "tests/unit/service/flow/test_connect_table.py::test_a_transition_outside_the_table_is_refused",
        ],
        "a status change outside the status machine (Transition) refused by the flow and every store",
    ),
    check(
        "store_copy.never_undo_a_deletion",
        [
            f"{CONTRACT}::test_a_copy_step_writes_what_the_copy_rules_decide[sqlite]",
            f"{STORE_COPY}::test_a_second_copy_from_sqlite_to_postgres_brings_back_no_deletion",
        ],
        "store copy-from leaves out a grant the target deleted (made at or before the deletion)",
    ),
    check(
        "store_copy.carry_deletions",
        [
            f"{CONTRACT}::test_a_copy_step_writes_what_the_copy_rules_decide[sqlite]",
            f"{STORE_COPY}::test_a_second_copy_from_sqlite_to_postgres_brings_back_no_deletion",
        ],
        "store copy-from carries the source's deletions over (a disconnect on the old store)",
    ),
    check(
        "store_copy.window",
        [f"{STORE_COPY}::test_a_copy_after_the_window_closed_is_refused"],
        "no store copy-from after the deletions of its window may be forgotten",
    ),
    check(
        "sqlite.remember_deletion",
        [f"{CONTRACT}::test_every_deletion_is_remembered_until_it_is_forgotten[sqlite]"],
        "every deleted connection remembered (the copy's deletions)",
        markers=2,
    ),
    check(
        "postgres.remember_deletion",
        [
            f"{CONTRACT}::test_every_deletion_is_remembered_until_it_is_forgotten[postgres]",
            f"{STORE_COPY}::test_a_second_copy_from_sqlite_to_postgres_brings_back_no_deletion",
        ],
        "every deleted connection remembered, in the deleting statement",
    ),
    check(
        "redis.remember_deletion",
        [
            f"{CONTRACT}::test_every_deletion_is_remembered_until_it_is_forgotten[redis]",
            f"{STORE_COPY}::test_a_second_copy_from_redis_to_cluster_brings_back_no_deletion",
        ],
        "every deleted connection remembered, in the deleting script (Lua)",
    ),
    check(
        "redis.copy_compare_and_set",
        [
            "tests/integration/token_store/backends/redis/test_store.py"
            "::test_a_copy_step_is_written_only_over_what_it_read"
        ],
        "a copy step writes only over the connection and deletion it read (Lua)",
    ),
    check(
        "sqlite.take_oauth_state",
        [f"{CONTRACT}::test_oauth_state_single_use[sqlite]"],
        "OAuth state taken once (DELETE ... RETURNING)",
    ),
    check(
        "sqlite.take_nonce",
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[sqlite]"],
        "requestState nonce taken once",
    ),
    check(
        "sqlite.nonce_slot",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[sqlite]"],
        "a nonce slot holds one live nonce (unique index, INSERT OR REPLACE)",
    ),
    check(
        "postgres.nonce_slot",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[postgres]"],
        "a nonce slot holds one live nonce (the slot's row takes the new nonce)",
    ),
    check(
        "sqlite.pending_limit",
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[sqlite]"],
        "a user's live elicitations capped at max_pending_per_user",
    ),
    check(
        "sqlite.transition_cas",
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[sqlite]"],
        "transition is a compare-and-set on the status",
    ),
    check(
        "sqlite.release_lock_owner",
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[sqlite]"],
        "a lock is released only by its owner",
        markers=2,
    ),
    check(
        "sqlite.open_elicitation_single_use",
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[sqlite]"],
        "opening a link stores its state only when it opened the elicitation",
    ),
    check(
        "redis.take_oauth_state",
        [f"{CONTRACT}::test_oauth_state_single_use[redis]"],
        "OAuth state taken once (GETDEL)",
    ),
    check(
        "redis.take_nonce",
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[redis]"],
        "requestState nonce taken once (GETDEL)",
    ),
    check(
        "redis.nonce_slot",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[redis]"],
        "a nonce slot holds one live nonce (the slot's last nonce deleted in the script)",
    ),
    check(
        "redis.nonce_slot_cluster",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[cluster]"],
        "on Cluster too, a nonce slot holds one live nonce (the declared old nonce deleted)",
    ),
    check(
        "redis.pending_limit",
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[redis]"],
        "a user's live elicitations capped at max_pending_per_user (Lua)",
    ),
    check(
        "redis.transition_cas",
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[redis]"],
        "transition is a compare-and-set on the status (Lua)",
    ),
    check(
        "redis.release_lock_owner",
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[redis]"],
        "a lock is released only by its owner (Lua)",
    ),
    check(
        "redis.open_elicitation_single_use",
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[redis]"],
        "opening a link stores its state only when it opened the elicitation (Lua)",
    ),
    check(
        "caps.sessions_per_user",
        [
            "tests/unit/service/mcp/sdk/test_session_limits.py::test_sessions_per_user_are_capped_with_429_and_other_users_are_unaffected"
        ],
        "cap on 2025-11-25 sessions per user (429)",
    ),
    check(
        "caps.sessions_per_replica",
        ["tests/unit/service/mcp/sdk/test_session_limits.py::test_sessions_per_replica_are_capped"],
        "cap on sessions per replica (429)",
    ),
    check(
        "caps.admitted_within_caps",
        [
            "tests/unit/service/mcp/sdk/test_session_limits.py::test_concurrent_initializes_of_one_user_are_admitted_up_to_the_cap_only",
            "tests/security/test_session_caps.py::test_concurrent_initializes_of_one_user_cannot_race_past_the_cap",
        ],
        "session caps counted and admitted in one step (inside the SDK's admission)",
        markers=2,
    ),
    check(
        "headers.single_valued_fields",
        [
            "tests/unit/service/http/test_single_valued_headers.py",
            "tests/security/test_session_caps.py::test_a_repeated_protocol_version_is_refused_before_any_session_opens",
        ],
        "a request repeating a single-valued header field gets 400 before anything reads it",
    ),
    check(
        "sdk.hooks_present",
        [
            "tests/unit/service/mcp/sdk/test_hooks.py::test_a_missing_hook_is_named",
            "tests/unit/service/mcp/sdk/test_hooks.py::test_no_server_is_built_on_an_sdk_without_a_hook",
        ],
        "a server refuses an SDK that lacks a private part the caps or the replay isolation need",
    ),
    check(
        "caps.requests_per_second_per_user",
        [
            "tests/unit/service/mcp/sdk/test_session_limits.py::"
            "test_requests_a_second_per_user_are_limited_with_retry_after_and_other_users_are_unaffected",
        ],
        "a user past its MCP requests a second (and burst) gets 429 with Retry-After",
    ),
    check(
        "caps.requests_per_user",
        ["tests/unit/service/mcp/sdk/test_session_limits.py::test_requests_in_flight_per_user_are_capped"],
        "cap on requests in progress per user (429)",
    ),
    check(
        "server.head_timeout",
        [
            "tests/unit/service/http/test_server.py::test_a_slow_head_is_closed_and_a_prompt_client_is_served_meanwhile"
        ],
        "a connection whose request head is not complete in time is closed",
    ),
    check(
        "server.max_waiting_heads",
        ["tests/unit/service/http/test_server.py::test_at_most_max_connections_wait_for_a_head_or_a_body"],
        "at most max_connections_awaiting_head connections wait for a head or a body (oldest closed first)",
    ),
    check(
        "server.body_timeout",
        [
            "tests/unit/service/http/test_server.py::test_a_slow_body_is_closed_and_a_prompt_client_is_served_meanwhile",
            "tests/unit/service/http/test_server.py::test_a_body_still_coming_after_its_answer_is_bounded_too",
        ],
        "a connection whose request body is not complete in time is closed",
    ),
    check(
        "server.body_waiters_counted",
        ["tests/unit/service/http/test_server.py::test_at_most_max_connections_wait_for_a_head_or_a_body"],
        "connections waiting for a body count with those waiting for a head",
    ),
    check(
        "server.waiting_within_file_limit",
        [
            "tests/unit/service/http/test_server.py::test_waiting_connections_are_bounded_by_half_the_open_file_limit"
        ],
        "at most half the open-file limit of connections wait for a request",
    ),
    check(
        "server.one_body_framing",
        [
            "tests/unit/service/http/test_server.py::test_a_request_that_frames_its_body_twice_is_refused_and_its_connection_closed"
        ],
        "a request with both Content-Length and Transfer-Encoding gets 400 and its connection closes",
    ),
    check(
        "requests.client_gone_not_an_error",
        ["tests/unit/service/http/test_client_gone.py::test_a_client_gone_before_its_body_is_an_info_line"],
        "a client that disconnects before its body was read is an INFO line, not an ERROR",
    ),
    check(
        "embedding.browser_half_bounded",
        ["tests/kit/test_embedding.py::test_the_browser_half_refuses_what_our_server_refuses"],
        "an embedding server's browser half runs the request pass (431, 413, single-valued fields)",
    ),
    check(
        "logs.request_id_shape",
        ["tests/unit/service/http/test_request_id.py::test_request_id_shape"],
        "a client's X-Request-ID is used only when it has a plain shape",
    ),
    check(
        "logs.flow_pseudonym",
        ["tests/e2e/test_operability.py::test_json_logs_join_a_failure_to_the_flows_creation"],
        "log lines carry a keyed hash of the flow, never the elicitation id (a capability)",
    ),
    check(
        "metrics.unknown_tool_label",
        ["tests/e2e/test_operability.py::test_an_unknown_tool_name_does_not_become_a_label"],
        "an unknown tool is -32602 and never a metric label",
    ),
    check(
        "completion.failure_reported_once",
        [
            "tests/unit/service/mcp/completion/test_hub.py::test_a_failed_flow_is_notified_and_its_reason_is_reported_once"
        ],
        "a failed flow's reason is reported once; the next call asks again",
    ),
    check(
        "completion.failure_per_user",
        [
            "tests/unit/service/mcp/completion/test_hub.py::test_a_failure_is_reported_only_to_the_user_whose_flow_it_was"
        ],
        "a failure notice is keyed by its user too, not by a session id alone",
    ),
    check(
        "broker.stateless_session_id",
        [f"{UNIT_CHECKS}::test_session_id_checked_by_sdk"],
        "a 2026-07-28 request's Mcp-Session-Id names no session",
    ),
    check(
        "connections.default_own_account",
        [f"{UNIT_ROUTES}::test_the_default_account_is_shown_set_and_cleared_for_the_users_own_accounts"],
        "the default account on /connections is one the signed-in user holds",
    ),
    check(
        "logs.only_redacting_handlers",
        [
            "tests/unit/service/observability/test_redaction.py::test_configure_logging_replaces_a_handler_that_does_not_redact"
        ],
        "no handler installed by a library prints unredacted lines beside ours",
    ),
    check(
        "nginx.error_log_without_queries",
        ["tests/integration/test_deploy_kit.py::test_nginx_error_log_quotes_no_codes_states_or_links"],
        "nginx's error log never quotes codes, states or connect links",
    ),
    check(
        "nginx.replica_gone_404",
        ["tests/integration/test_deploy_kit.py::test_nginx_answers_404_for_a_session_whose_replica_is_gone"],
        "a session whose replica is gone gets 404, so the client starts a new one",
    ),
    check(
        "nginx.single_valued_fields",
        ["tests/integration/test_deploy_kit.py::test_nginx_never_passes_a_repeated_single_valued_field"],
        "nginx refuses (1.23+) or passes one line of (1.22) a repeated MCP header field",
        markers=3,
    ),
    check(
        "metrics.off_the_public_port",
        ["tests/security/test_leakage.py::test_the_public_port_does_not_serve_metrics_by_default"],
        "GET /metrics only on the metrics port when one is set",
    ),
    check(
        "metrics.own_port_by_default",
        ["tests/security/test_leakage.py::test_the_public_port_does_not_serve_metrics_by_default"],
        "metrics on their own port by default, not on the public one",
    ),
    check(
        "nginx.metrics_private",
        ["tests/integration/test_deploy_kit.py::test_nginx_passes_one_request_id_and_keeps_metrics_private"],
        "the public proxy does not expose /metrics",
    ),
    check(
        "nginx.request_id_shape",
        ["tests/integration/test_deploy_kit.py::test_nginx_accepts_a_request_id_only_in_the_replicas_shape"],
        "a caller's X-Request-ID reaches nginx's log and the replica only in the replicas' shape",
    ),
    check(
        "nginx.callbacks_retried_on_connection_errors",
        [
            "tests/integration/test_deploy_kit.py::"
            "test_nginx_retries_an_oauth_callback_on_another_replica_like_other_routes",
            "tests/e2e/test_router.py::test_callbacks_are_served_while_a_killed_replica_is_still_in_dns",
        ],
        "an OAuth callback the router could not pass to one replica goes to the next (a dead one in DNS)",
    ),
    check(
        "nginx.requests_per_address",
        [DEPLOY_KIT_LIMITS],
        "an address past 100 requests a second (bursts of 1000) without a bearer token gets 429",
    ),
    check(
        "nginx.connections_per_address",
        [DEPLOY_KIT_LIMITS],
        "an address past 200 connections at once without a bearer token gets 429",
    ),
    check(
        "nginx.mcp_limited_per_user_not_per_address",
        [DEPLOY_KIT_LIMITS],
        "an MCP request with a bearer token is never counted per address (the replica limits its user)",
    ),
    check(
        "nginx.body_timeout",
        [
            "tests/integration/test_deploy_kit.py::test_nginx_reads_each_body_whole_before_a_replica_and_times_out_a_stalled_one"
        ],
        "nginx ends a request whose body stops coming (client_body_timeout)",
    ),
    check(
        "nginx.bodies_buffered",
        [
            "tests/integration/test_deploy_kit.py::test_nginx_reads_each_body_whole_before_a_replica_and_times_out_a_stalled_one"
        ],
        "nginx reads every body whole before a replica is chosen, browser routes included",
    ),
    check(
        "nginx.head_limits_under_the_replicas",
        ["tests/integration/test_deploy_kit.py::test_nginx_refuses_request_heads_the_replicas_would"],
        "nginx refuses request heads over its limit, under the replicas' own",
    ),
    check(
        "limits.request_head",
        ["tests/unit/service/http/test_request_limits.py"],
        "a replica refuses a head over 16 KiB however it arrived (431)",
    ),
    check(
        "limits.request_body",
        ["tests/unit/service/http/test_request_limits.py"],
        "a replica refuses a body over 1 MiB on every route (413)",
    ),
    check(
        "limits.installed",
        [
            "tests/unit/service/http/test_request_limits.py::test_the_app_bounds_heads_and_bodies_on_every_route"
        ],
        "the app installs the head and body limits (on the MCP endpoint and the browser routes)",
        markers=2,
    ),
    check(
        "settings.secret_in_one_form",
        [
            "tests/unit/service/test_settings.py::test_a_secret_set_twice_or_an_unreadable_file_names_the_variable_not_the_value"
        ],
        "a secret set both in the environment and as a file is refused",
    ),
    check(
        "k8s.secrets_as_files",
        ["tests/project/test_deploy_kit.py::test_k8s_configmap_and_secret_make_a_valid_configuration"],
        "no secret in the mcp pods' environment: the Secret is mounted as files",
    ),
    check(
        "k8s.network_policy_mcp_pods",
        ["tests/project/test_deploy_kit.py::test_k8s_network_policy_admits_only_the_router_and_the_scraper"],
        "the mcp pods' http port from the router only, metrics from the monitoring namespace only",
    ),
    check(
        "redis.maxmemory_noeviction",
        [
            "tests/project/test_deploy_kit.py::test_every_redis_the_kit_runs_answers_oom_before_its_memory_limit"
        ],
        "the kit's Redis answers -OOM under its memory limit instead of being killed",
    ),
    check(
        "images.pinned_by_digest",
        ["tests/project/test_deploy_kit.py::test_every_image_and_the_buildkit_frontend_is_pinned_by_digest"],
        "every image the kit runs is named by digest",
    ),
    check(
        "outbound.response_byte_limit",
        [
            "tests/unit/service/providers/test_outbound_http.py::test_an_answer_over_the_byte_limit_is_refused_without_being_read_whole",
            "tests/unit/service/providers/test_outbound_http.py::test_a_token_answer_over_its_byte_limit_is_refused_at_authlib",
        ],
        "a provider's answer read streamed up to a byte limit",
    ),
    check(
        "outbound.call_deadline",
        [
            "tests/unit/service/providers/test_outbound_http.py::test_a_dripping_answer_ends_at_the_whole_call_deadline",
            "tests/unit/service/providers/test_outbound_http.py::test_a_dripping_token_answer_ends_at_the_whole_call_deadline",
        ],
        "one deadline for a whole provider call, not per read",
    ),
    check(
        "provider_oauth.bounded_token_fields",
        ["tests/unit/service/providers/test_oauth.py::test_a_token_response_field_over_the_limit_is_refused"],
        "each kept token response field at most 8192 characters (a 2 MB scope)",
    ),
    check(
        "provider_oauth.vschar_tokens",
        [
            "tests/unit/service/providers/test_oauth.py::test_a_token_with_characters_outside_vschar_is_refused"
        ],
        "access and refresh tokens of VSCHAR only (RFC 6749 Appendix A)",
    ),
    check(
        "provider_oauth.understood_token_type",
        [
            "tests/unit/service/providers/test_oauth.py::test_a_token_type_the_provider_does_not_list_is_refused"
        ],
        "token_type one of the provider's token_types (RFC 6749 §7.1)",
    ),
    check(
        "provider_oauth.bounded_account_id",
        [f"{UNIT_CHECKS}::test_require_account_id_of_provider"],
        "the account id a provider names is at most 256 characters",
    ),
    check(
        "lifecycle.refresh_lock_ttl",
        [
            "tests/unit/service/flow/test_lifecycle.py::test_the_lock_outlives_the_holders_deadline_so_the_refresh_token_is_sent_once"
        ],
        "the refresh lock outlives the holder's deadline",
    ),
    check(
        "lifecycle.refresh_within_deadline",
        [
            "tests/unit/service/flow/test_lifecycle.py::test_a_refresh_the_provider_never_answers_is_abandoned_at_its_deadline"
        ],
        "the refresher abandons its provider call at the deadline",
    ),
    check(
        "logs.control_characters_escaped",
        [
            "tests/unit/service/observability/test_logs.py::test_text_lines_escape_control_characters_so_a_value_cannot_forge_a_record"
        ],
        "control characters escaped in text log lines (CWE-117)",
    ),
    check(
        "origin.same_origin",
        [
            f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route",
            f"{UNIT_CHECKS}::test_require_same_origin",
        ],
        "a POST naming a foreign Origin is refused",
    ),
    check(
        "origin.connect_posts",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /connect, /connect/api-key and /connect/cancel, before anything else",
    ),
    check(
        "origin.connections_posts",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /connections/disconnect and /connections/default",
    ),
    check(
        "origin.logout",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /logout",
    ),
    check(
        "login.no_silent_account_switch",
        [
            f"{SEC_BROWSER}::test_login_while_signed_in_never_switches_the_account",
            f"{UNIT_CHECKS}::test_require_no_silent_account_switch",
        ],
        "a sign-in never replaces another signed-in user (GET /login and /login/callback)",
    ),
    check(
        "login.no_switch_on_login",
        [f"{SEC_BROWSER}::test_login_while_signed_in_never_switches_the_account"],
        "GET /login while signed in starts no sign-in",
    ),
    check(
        "login.no_switch_on_callback",
        [
            "tests/unit/connect_routes/test_login.py::test_login_callback_never_replaces_another_signed_in_user"
        ],
        "/login/callback keeps the signed-in user when another signs in",
    ),
    check(
        "login.prompt_login_for_connect_links",
        [f"{SEC_BROWSER}::test_sign_in_for_a_connect_link_asks_the_authorization_server_again"],
        "a sign-in for a connect link sends prompt=login",
    ),
    check(
        "names.visible_client_name",
        [
            "tests/security/test_phishing.py::test_client_name_with_blank_letters_is_not_shown",
            f"{UNIT_CHECKS}::test_require_visible_client_name",
        ],
        "no blank or invisible letters in a client name shown (our pages, dev AS registration)",
    ),
    check(
        "names.lookalikes_flagged",
        [
            "tests/security/test_phishing.py::test_lookalike_account_and_client_names_are_shown_with_their_code_points"
        ],
        "look-alike account and client names are flagged with their code points",
    ),
    check(
        "dev_as.login_csrf",
        [
            f"{SEC_BROWSER}::test_dev_as_login_without_its_form_token_is_refused",
            "tests/unit/mock_providers/dev_as/test_server.py::test_login_form_needs_its_own_token",
        ],
        "the dev AS login form needs its CSRF token (login CSRF at the AS)",
    ),
    check(
        "completion_bus.finished_in_store",
        [
            "tests/security/test_completion_bus.py",
            "tests/unit/service/mcp/completion/test_bus.py::test_require_finished_in_store",
        ],
        "a NOTIFY on the PostgreSQL bus completes only a flow the store says has ended",
    ),
    check(
        "postgres.pending_limit_per_user",
        [f"{CONTRACT}::test_concurrent_creates_respect_the_limit[postgres]"],
        "PostgreSQL counts and inserts a user's live elicitations one writer at a time",
        attempts=3,
    ),
    check(
        "postgres.take_oauth_state",
        [f"{CONTRACT}::test_oauth_state_single_use[postgres]"],
        "OAuth state taken once (DELETE ... RETURNING)",
    ),
    check(
        "postgres.take_nonce",
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[postgres]"],
        "requestState nonce taken once",
    ),
    check(
        "postgres.pending_limit",
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[postgres]"],
        "a user's live elicitations capped at max_pending_per_user",
    ),
    check(
        "postgres.transition_cas",
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[postgres]"],
        "transition is a compare-and-set on the status",
    ),
    check(
        "postgres.release_lock_owner",
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[postgres]"],
        "a lock is released only by its owner",
    ),
    check(
        "postgres.open_elicitation_single_use",
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[postgres]"],
        "opening a link stores its state only when it opened the elicitation",
    ),
    check(
        "connect.link_shown_again_to_same_client",
        [
            f"{UNIT_CHECKS}::test_reusable_link_of_same_user_and_client",
            "tests/security/test_link_fallback.py::test_link_shown_again_only_to_its_user_and_client",
        ],
        "a link shown again only to the client that asked for it (the link in a tool error)",
    ),
    check(
        "connect.link_shown_again_unopened",
        [
            f"{UNIT_CHECKS}::test_reusable_link_of_same_user_and_client",
            "tests/security/test_link_fallback.py::test_an_opened_link_is_not_shown_again",
        ],
        "only an unopened link is shown again (an opened one is spent)",
    ),
    check(
        "redis.replica_acknowledgement",
        [
            "tests/integration/token_store/backends/redis/test_store_sentinel.py::test_a_write_no_replica_acknowledges_fails_and_other_users_still_work"
        ],
        "with MCPUC_STORE_WAIT_REPLICAS, a token set no replica acknowledged is reported unstored",
    ),
    check(
        "redis.slot_tag",
        [
            "tests/integration/token_store/backends/redis/test_store_cluster.py::test_an_id_without_its_users_slot_tag_is_refused_and_other_users_still_work"
        ],
        "on Redis Cluster an id or state lies in its user's hash slot, or is refused",
    ),
    check(
        "redis.slot_tag_masked",
        [
            f"{UNIT_CHECKS}::test_an_id_tells_nobody_without_the_servers_key_whose_it_is",
            "tests/integration/token_store/backends/redis/test_store_cluster.py::test_an_id_names_its_users_slot_only_to_whoever_holds_the_key",
        ],
        "on Redis Cluster an id carries its user's slot tag masked under the server's key",
    ),
    check(
        "settings.slot_tags_only_on_cluster",
        [
            f"{UNIT_CHECKS}::test_an_id_tells_nobody_without_the_servers_key_whose_it_is",
            "tests/security/test_ids_and_states.py::test_a_link_or_a_state_does_not_tell_whose_it_is",
        ],
        "off Redis Cluster an id is random bits alone, with no slot tag",
    ),
    check(
        "admin.own_port",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_request_on_the_public_port"],
        "the admin API answers only on its own port",
    ),
    check(
        "admin.admin_scope",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_user_token_without_the_admin_scope"],
        "a user's bearer without the admin scope acts as an operator",
    ),
    check(
        "admin.static_token",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_user_token_without_the_admin_scope"],
        "any bearer passes as the static admin token",
    ),
    check(
        "keys.retire_only_unused",
        [
            "tests/unit/service/ops/cli/test_keys.py::test_keys_retire_refuses_while_a_record_is_sealed_under_the_key"
        ],
        "a key is retired while records are still sealed under it",
    ),
    check(
        "webhooks.signature_covers_body",
        [
            "tests/unit/service/observability/test_webhooks.py::test_a_webhook_is_signed_verifiable_and_names_no_secret"
        ],
        "the webhook signature covers the body",
    ),
    check(
        "webhooks.lease_covers_attempt",
        [
            "tests/unit/service/observability/test_webhooks.py::test_a_message_claimed_too_late_for_its_lease_waits_for_the_lease_to_end"
        ],
        "a webhook is sent only while its lease lasts through the attempt",
    ),
    *(
        check(
            f"{backend}.settle_webhook_own_lease",
            [
                f"{CONTRACT}::test_a_claimer_whose_lease_ended_cannot_settle_over_the_next_claimers_lease[{backend}]"
            ],
            "a webhook attempt is recorded only under the claimer's own lease",
        )
        for backend in ("sqlite", "redis", "postgres")
    ),
    *(
        check(
            f"{backend}.claim_webhooks_due",
            [f"{CONTRACT}::test_webhook_outbox_claims_due_messages_once_per_lease[{backend}]"],
            "a webhook under a live lease is never claimed again",
        )
        for backend in ("sqlite", "redis", "postgres")
    ),
    check(
        "operator.revoke_by_iss_and_sub",
        [
            "tests/unit/service/flow/test_operator.py::test_revoke_user_is_iss_and_sub_never_the_same_sub_elsewhere"
        ],
        "a user is (iss, sub): the same sub at another issuer is not removed",
    ),
    check(
        "admin.unknown_members",
        ["tests/security/test_admin_api.py::test_admin_api_lets_the_static_token_act_and_audits_it"],
        "a misspelt member of an admin request is refused, never ignored",
    ),
    check(
        "admin.own_audience",
        ["tests/security/test_admin_api.py::test_an_mcp_token_with_the_admin_scope_is_not_an_admin_token"],
        "the admin API takes MCP access tokens (the MCP resource's audience) as admin tokens",
    ),
    check(
        "settings.admin_resource_of_its_own",
        ["tests/unit/service/ops/test_admin_api.py::test_the_admin_api_needs_a_resource_of_its_own"],
        "the admin API starts without an audience of its own, or with the MCP resource's",
    ),
    check(
        "admin.client_allow_list",
        ["tests/security/test_admin_api.py::test_only_listed_admin_clients_act_as_operators"],
        "a token of a client not on the admin client list acts as an operator",
    ),
    check(
        "admin.unknown_query_parameters",
        ["tests/security/test_admin_api.py::test_an_unknown_query_parameter_is_refused_not_ignored"],
        "a misspelt filter in the admin API's query is ignored (and every user listed)",
    ),
    check(
        "admin.refusals_audited",
        ["tests/security/test_admin_api.py::test_refused_authentications_are_audited_at_a_bounded_rate"],
        "a refused admin authentication leaves no audit event",
    ),
    check(
        "admin.refusal_audit_throttled",
        ["tests/security/test_admin_api.py::test_refused_authentications_are_audited_at_a_bounded_rate"],
        "a flood of refused admin requests floods the audit log",
    ),
    check(
        "cli.output_escaped",
        [
            "tests/unit/service/ops/cli/test_preamble.py::test_every_line_printed_is_escaped_as_the_text_log_writes_it",
            "tests/security/test_operator_cli.py::test_provider_supplied_labels_reach_the_operators_terminal_escaped",
        ],
        "the CLI prints values from outside (a provider's account label) with their control characters",
    ),
    check(
        "admin.nested_body",
        ["tests/security/test_admin_api.py::test_malformed_requests_get_the_documented_json_error"],
        "a deeply nested admin request body is a 500",
    ),
    check(
        "gateway.public_downstream_address",
        [f"{GATEWAY_ADDRESSES}::test_private_loopback_and_unknown_addresses_are_refused"],
        "a remote MCP server's discovery URLs resolve to public addresses only (SSRF)",
    ),
    check(
        "gateway.public_downstream_peer",
        [
            f"{GATEWAY_ADDRESSES}::test_a_private_or_unknown_peer_is_refused",
            f"{GATEWAY_ADDRESSES}::test_a_connection_to_a_private_peer_is_closed_before_a_byte_is_sent",
            "tests/security/test_gateway.py::test_a_name_that_rebinds_to_a_private_address_gets_no_request",
            "tests/security/test_gateway.py::"
            "test_a_downstream_that_now_resolves_inside_is_sent_no_token_and_no_code",
        ],
        "every connection opened for a remote MCP server reaches a public peer (DNS rebinding)",
    ),
    check(
        "gateway.metadata_on_resource_origin",
        [f"{GATEWAY_RESOURCE}::test_metadata_named_on_another_origin_is_refused"],
        "protected-resource metadata named by a challenge is on the server's own origin",
    ),
    check(
        "gateway.metadata_for_resource",
        [f"{GATEWAY_RESOURCE}::test_metadata_for_another_resource_is_refused"],
        "RFC 9728 §3.3: metadata for another resource is not used",
    ),
    check(
        "gateway.pinned_authorization_server",
        [f"{GATEWAY_DISCOVERY}::test_the_pinned_authorization_server_must_be_listed"],
        "a pinned issuer must be the one the metadata lists",
    ),
    check(
        "gateway.authorization_server_for_resource",
        [f"{GATEWAY_DISCOVERY}::test_an_authorization_server_for_other_resources_is_refused"],
        "an authorization server that serves other resources only is refused",
    ),
    check(
        "gateway.pkce_s256_advertised",
        [f"{GATEWAY_DISCOVERY}::test_pkce_s256_must_be_advertised"],
        "no PKCE S256 in the metadata: refused (MCP authorization, Authorization Code Protection)",
    ),
    check(
        "gateway.downstream_origin",
        [f"{GATEWAY_UNIT}/test_transport.py::test_only_the_downstream_origin_is_allowed"],
        "a user's token goes to the remote MCP server's origin only",
    ),
    check(
        "gateway.unshadowed_tool_names",
        [
            f"{GATEWAY_UNIT}/test_names.py::test_overlapping_namespaces_are_refused",
            f"{GATEWAY_UNIT}/test_names.py::test_a_tool_of_ours_inside_a_namespace_is_refused",
        ],
        "a downstream's tools cannot shadow ours or another downstream's",
        markers=2,
    ),
    check(
        "gateway.neutralize_html",
        [f"{GATEWAY_UNIT}/test_proxy.py::test_results_pass_without_meta_and_never_as_html"],
        "a downstream's HTML reaches our client as plain text",
        markers=2,
    ),
    check(
        "gateway.step_up_once",
        [
            f"{GATEWAY_UNIT}/test_proxy.py::test_a_step_up_asks_for_the_union_once_and_never_again_for_what_was_granted"
        ],
        "a step-up never asks again for scopes already granted (no loop)",
    ),
    check(
        "gateway.grant_of_current_issuer",
        [
            "tests/unit/service/flow/test_lifecycle.py::"
            "test_a_grant_of_another_authorization_server_is_never_refreshed_there",
            "tests/unit/service/providers/test_oauth.py::"
            "test_a_downstream_grant_records_its_issuer_and_goes_back_to_it_only",
        ],
        "a grant of the authorization server a downstream left is refreshed or revoked at the new one",
    ),
    check(
        "callback.flow_at_current_issuer",
        [f"{UNIT_CHECKS}::test_a_flow_begun_at_an_authorization_server_the_provider_left_is_not_finished"],
        "a flow begun at the old authorization server is finished with the new server's client",
    ),
    check(
        "gateway.no_client_from_another_server",
        [
            f"{GATEWAY_UNIT}/test_moves.py::test_a_client_registered_beforehand_is_never_taken_to_another_server"
        ],
        "the operator's client, registered at one authorization server, is presented to another",
    ),
)
# --------------------------------------------------------------------------------------------------
# Markers: where each check is, and the operator that removes it
# --------------------------------------------------------------------------------------------------

# The trees that hold checks, and the kinds of file a marker may sit in.
SCANNED = ("service", "connect_routes", "token_store", "mock_providers", "deploy")
SUFFIXES = (".py", ".lua", ".conf", ".yaml", ".yml")
MARKER = re.compile(r"(?:#|--)\s*mutant:\s*(?P<id>[A-Za-z0-9_.-]+)(?P<operator>.*)$")
CONTINUED = re.compile(r"^\s*(?:#|--)\s?(?P<text>.*)$")


class TableError(Exception):
    """The table and the markers disagree, or a marked statement has no operator."""


@dataclasses.dataclass(frozen=True)
class Marker:
    id: str
    file: str  # relative to the root
    line: int  # the marked line (1-based): the comment's own, or the line below a comment line
    operator: str  # "" for the default of the marked statement
    python: bool  # a Python comment (operators on the syntax tree) or a line of text (config, Lua)
    where: str = ""  # the enclosing `def` (`Class.method`), for the printed tables


def scanned_files(root: Path) -> list[Path]:
    """The files that may hold markers. A generated copy (its first line `# GENERATED ...`, such
    as the router's ConfigMap) carries its source's markers; only the source is mutated."""
    return sorted(
        path
        for top in SCANNED
        if (root / top).is_dir()
        for path in (root / top).rglob("*")
        if path.suffix in SUFFIXES
        and path.is_file()
        and "__pycache__" not in path.parts
        and not path.read_text(encoding="utf-8").startswith("# GENERATED")
    )


def python_comment_lines(text: str) -> set[int]:
    """Lines holding a `#` comment token (a `mutant:` text inside a string is not one)."""
    lines = set()
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            lines.add(token.start[0])
    return lines


def is_marker_line(line: str) -> bool:
    """A comment line holding a marker only (not a marker trailing a line of code)."""
    return MARKER.search(line) is not None and line.lstrip().startswith(("#", "--"))


def markers_in(root: Path, path: Path) -> list[Marker]:
    text = path.read_text(encoding="utf-8")
    lines = text.split("\n")
    is_python = path.suffix == ".py"
    comments = python_comment_lines(text) if is_python else set()
    tree = ast.parse(text) if is_python else None
    found = []
    for index, line in enumerate(lines):
        match = MARKER.search(line)
        if match is None:
            continue
        operator = match["operator"].strip()
        number = index + 1
        # A long operator goes on over comment lines: a line ending in a backslash continues.
        while operator.endswith("\\") and number < len(lines):
            number += 1
            more = CONTINUED.match(lines[number - 1])
            if more is None:
                break
            operator = operator[:-1].rstrip() + " " + more["text"].strip()
        own_line = line.lstrip().startswith(("#", "--"))
        target = number + 1 if own_line else index + 1
        # Markers stacked above one line all mark it.
        while own_line and target <= len(lines) and is_marker_line(lines[target - 1]):
            target += 1
            while lines[target - 2].rstrip().endswith("\\") and target <= len(lines):
                target += 1
        python = is_python and (index + 1) in comments
        found.append(
            Marker(
                id=match["id"],
                file=path.relative_to(root).as_posix(),
                line=target,
                operator=operator,
                python=python,
                where=enclosing(tree, target) if tree is not None else "",
            )
        )
    return found


def enclosing(tree: ast.AST, line: int) -> str:
    """`Class.method`, `function` or a module-level name whose definition holds `line`."""
    names: list[str] = []
    body = getattr(tree, "body", [])
    while True:
        for node in body:
            if node.lineno <= line <= (node.end_lineno or node.lineno):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    names.append(node.name)
                    body = node.body
                    break
                if not names and isinstance(node, ast.Assign | ast.AnnAssign):
                    target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    if isinstance(target, ast.Name):
                        names.append(target.id)
                return ".".join(names)
        else:
            return ".".join(names)


def find_markers(root: Path) -> list[Marker]:
    return [marker for path in scanned_files(root) for marker in markers_in(root, path)]


def validate(checks: Sequence[Check], markers: Sequence[Marker]) -> list[str]:
    """Every id has exactly its markers, every marker an id, no id twice in the table."""
    problems = []
    ids = [c.id for c in checks]
    for duplicate in sorted({i for i in ids if ids.count(i) > 1}):
        problems.append(f"{duplicate}: twice in the table")
    by_id: dict[str, list[Marker]] = {}
    for marker in markers:
        by_id.setdefault(marker.id, []).append(marker)
    for entry in checks:
        found = by_id.get(entry.id, [])
        if len(found) != entry.markers:
            where = ", ".join(f"{m.file}:{m.line}" for m in found) or "no marker"
            problems.append(
                f"{entry.id}: {len(found)} marker(s) in the tree, the table wants {entry.markers} ({where})"
            )
    for marker in markers:
        if marker.id not in ids:
            problems.append(f"{marker.file}:{marker.line}: marker {marker.id!r} has no entry in the table")
    return problems


# ---- operators ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Operator:
    """A marker's operator, parsed: a word with its argument, or a text substitution."""

    word: str  # "" (the default), true, false, none, pass, drop, unwrap, peek, orelse, unpin, ...
    argument: str = ""
    old: str = ""  # for word == "replace"
    new: str = ""


def parse_operator(text: str) -> Operator:
    text = text.strip()
    if not text:
        return Operator("")
    if text[0] in "\"'":
        try:
            tokens = list(tokenize.generate_tokens(io.StringIO(text).readline))
        except (tokenize.TokenError, SyntaxError) as exc:
            raise TableError(f"unreadable substitution {text!r} ({exc})") from None
        arrows = [t for t in tokens if t.type == tokenize.OP and t.string == "->"]
        if len(arrows) != 1:
            raise TableError(f'a substitution is `"old" -> "new"`, not {text!r}')
        cut = arrows[0].start[1]
        try:
            old, new = ast.literal_eval(text[:cut].strip()), ast.literal_eval(text[cut + 2 :].strip())
        except (ValueError, SyntaxError):
            raise TableError(f'a substitution is `"old" -> "new"`, not {text!r}') from None
        if not isinstance(old, str) or not isinstance(new, str) or not old or old == new:
            raise TableError(f"a substitution changes a non-empty text: {text!r}")
        return Operator("replace", old=old, new=new)
    word, _, argument = text.partition(" ")
    if word in ("before", "after"):
        try:
            argument = ast.literal_eval(argument.strip())
        except (ValueError, SyntaxError):
            raise TableError(f"`{word}` takes a string literal, not {argument!r}") from None
        if not isinstance(argument, str) or not argument:
            raise TableError(f"`{word}` takes a non-empty string")
    if word not in OPERATORS:
        raise TableError(f"unknown operator {word!r} (one of {', '.join(sorted(OPERATORS))})")
    return Operator(word, argument if word in ("before", "after") else argument.strip())


OPERATORS = {
    "true": "the condition becomes True",
    "false": "the condition becomes False (the default for `if` and `while`)",
    "none": "the value becomes None",
    "pass": "the statement becomes `pass` (the default for a call statement)",
    "drop": "`drop N M`: operands N, M of the and/or, items of the tuple or list, are left out",
    "unwrap": "a call becomes its first argument (`unwrap or X`: that, or X)",
    "orelse": "`a if c else b` becomes b",
    "return": "`return X`: the statement becomes `return X`",
    "peek": "a take becomes a read: .pop/.getdel -> .get, DELETE ... RETURNING -> SELECT",
    "before": '`before "line"`: the line is inserted above the statement, at its indentation',
    "after": '`after "line"`: the line is inserted below the statement, at its indentation',
    "swap-up": "(text) the line changes places with the line above it",
    "unpin": "(text) an image reference loses its @sha256: digest",
    "delete": "(text) the line is deleted, with its block (the default for text)",
    "replace": '`"old" -> "new"`: the text, found once in the marked statement, is substituted',
}

Edit = tuple[int, int, str]  # (start, end, replacement) as character offsets


class Source:
    """A file's text with conversions from (line, column) to offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        # Lines as `ast` counts them: only a newline ends one (str.splitlines also splits at \f).
        self.lines = [line for line in re.split(r"(?<=\n)", text) if line]
        self.starts = [0]
        for line in self.lines:
            self.starts.append(self.starts[-1] + len(line))
        # The text with the markers blanked out, where an operator looks for what it changes.
        masked = []
        continued = False
        for line in self.lines:
            match = MARKER.search(line)
            cut = match.start() if match else (len(line) - len(line.lstrip()) if continued else None)
            if cut is not None:
                body = line.rstrip("\r\n")
                line = line[:cut] + " " * (len(body) - cut) + line[len(body) :]
                continued = body.rstrip().endswith("\\")
            else:
                continued = False
            masked.append(line)
        self.masked = "".join(masked)

    def offset(self, line: int, utf8_column: int) -> int:
        """`ast` columns count UTF-8 bytes."""
        content = self.lines[line - 1].encode("utf-8")[:utf8_column].decode("utf-8")
        return self.starts[line - 1] + len(content)

    def span(self, node: ast.AST) -> tuple[int, int]:
        return (
            self.offset(node.lineno, node.col_offset),  # type: ignore[attr-defined]
            self.offset(node.end_lineno, node.end_col_offset),  # type: ignore[attr-defined]
        )

    def segment(self, node: ast.AST) -> str:
        start, end = self.span(node)
        return self.text[start:end]

    def line_span(self, first: int, last: int) -> tuple[int, int]:
        return self.starts[first - 1], self.starts[last]

    def indentation(self, line: int) -> str:
        content = self.lines[line - 1]
        return content[: len(content) - len(content.lstrip())]


def apply_edits(text: str, edits: Sequence[Edit], where: str) -> str:
    ordered = sorted(edits)
    for (_, end, _), (start, _, _) in itertools.pairwise(ordered):
        if start < end:
            raise TableError(f"{where}: two markers change the same text")
    for start, end, replacement in reversed(ordered):
        text = text[:start] + replacement + text[end:]
    return text


def replace_once(source: Source, start: int, end: int, old: str, new: str, where: str) -> Edit:
    found = source.masked.count(old, start, end)
    if found != 1:
        raise TableError(f"{where}: {old!r} found {found} times in the marked statement, not once")
    at = source.masked.index(old, start, end)
    return (at, at + len(old), new)


def marked_node(tree: ast.Module, line: int) -> ast.AST:
    """The outermost statement starting on `line`; else the outermost expression starting there."""
    statements = [n for n in ast.walk(tree) if isinstance(n, ast.stmt) and n.lineno == line]
    if statements:
        return statements[0]  # ast.walk is breadth first: the first is the outermost
    parts = [
        n
        for n in ast.walk(tree)
        if isinstance(n, ast.expr | ast.keyword) and getattr(n, "lineno", None) == line
    ]
    if not parts:
        # A line inside a string that goes on over several lines: the innermost expression
        # holding it.
        around = [
            n
            for n in ast.walk(tree)
            if isinstance(n, ast.expr) and n.lineno < line <= (n.end_lineno or n.lineno)
        ]
        if not around:
            raise TableError(f"line {line}: no statement or expression on the marked line")
        return min(around, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)
    return min(parts, key=lambda n: (n.col_offset, -(n.end_lineno or 0), -(n.end_col_offset or 0)))


def condition_of(node: ast.AST) -> ast.AST:
    """The test of an `if`, `while` or `a if c else b`; the value of a keyword; else the one
    conditional expression inside the node; else the expression itself."""
    if isinstance(node, ast.If | ast.While | ast.IfExp):
        return node.test
    if isinstance(node, ast.keyword):
        return node.value
    inner = [n for n in ast.walk(node) if isinstance(n, ast.IfExp)]
    if len(inner) == 1:
        return inner[0].test
    if isinstance(node, ast.expr):
        return node
    raise TableError(f"line {node.lineno}: `true`/`false` need a condition")  # type: ignore[attr-defined]


def value_of(node: ast.AST) -> ast.AST:
    """The expression a statement is about: its test, returned or assigned value, or call."""
    if isinstance(node, ast.If | ast.While):
        return node.test
    if isinstance(node, ast.Return | ast.Assign | ast.AnnAssign | ast.Expr | ast.keyword) and node.value:
        value: ast.AST = node.value
        return value.value if isinstance(value, ast.Await) else value
    return node


def first_parameter(function: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
    names = [a.arg for a in [*function.args.posonlyargs, *function.args.args]]
    if names and names[0] in ("self", "cls"):
        names = names[1:]
    if not names:
        raise TableError(f"line {function.lineno}: {function.name} has no parameter to pass through")
    return names[0]


def python_edits(source: Source, tree: ast.Module, markers: Sequence[Marker]) -> list[Edit]:
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    edits: list[Edit] = []
    dropped: dict[ast.AST, set[int]] = {}

    def drop(container: ast.AST, index: int, where: str) -> None:
        items = container.values if isinstance(container, ast.BoolOp) else container.elts  # type: ignore[attr-defined]
        if not -len(items) <= index < len(items):
            raise TableError(f"{where}: no operand {index} to drop")
        dropped.setdefault(container, set()).add(index % len(items))

    for marker in markers:
        where = f"{marker.id} ({marker.file}:{marker.line})"
        try:
            node = marked_node(tree, marker.line)
            operator = parse_operator(marker.operator)
        except TableError as exc:
            raise TableError(f"{where}: {exc}") from None
        word = operator.word
        start, end = source.span(node)
        parent = parents.get(node)
        if word == "":
            if isinstance(node, ast.If | ast.While):
                word = "false"
            elif isinstance(node, ast.Expr):
                word = "pass"
            elif isinstance(node, ast.expr) and isinstance(parent, ast.BoolOp | ast.List | ast.Tuple):
                items = parent.values if isinstance(parent, ast.BoolOp) else parent.elts
                drop(parent, items.index(node), where)
                continue
            elif isinstance(node, ast.Return | ast.FunctionDef | ast.AsyncFunctionDef):
                word = "return-default"
            elif isinstance(node, ast.With | ast.AsyncWith):
                items_end = source.span(node.items[-1].optional_vars or node.items[-1].context_expr)[1]
                edits.append((start, items_end, "if True"))
                continue
            elif isinstance(node, ast.For | ast.AsyncFor):
                edits.append((*source.span(node.iter), "()"))
                continue
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                value = node.value
                if isinstance(value, ast.Tuple | ast.List | ast.Set | ast.Dict):
                    empty = {ast.Tuple: "()", ast.List: "[]", ast.Set: "set()", ast.Dict: "{}"}[type(value)]
                    edits.append((*source.span(value), empty))
                    continue
                if isinstance(value, ast.Call) and ast.unparse(value.func) == "re.compile" and value.args:
                    edits.append((*source.span(value.args[0]), 'r".*"'))
                    continue
                raise TableError(f"{where}: no default operator for this assignment; name one")
            else:
                raise TableError(f"{where}: no default operator for a {type(node).__name__}; name one")
        if word in ("true", "false", "none"):
            target = condition_of(node) if word != "none" else value_of(node)
            edits.append((*source.span(target), word.title()))
        elif word == "pass":
            if not isinstance(node, ast.stmt):
                raise TableError(f"{where}: `pass` needs a statement")
            edits.append((start, end, "pass"))
        elif word == "return":
            if not isinstance(node, ast.stmt):
                raise TableError(f"{where}: `return` needs a statement")
            edits.append((start, end, f"return {operator.argument}".rstrip()))
        elif word == "return-default":
            function = node if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) else None
            if function is None:
                line = node.lineno  # type: ignore[attr-defined]
                around = [f for f in functions if f.lineno <= line <= (f.end_lineno or 0)]
                if not around:
                    raise TableError(f"{where}: a `return` outside a function")
                function = max(around, key=lambda f: f.lineno)
            passthrough = first_parameter(function)
            if function is node:
                first = function.body[0]
                at = source.starts[first.lineno - 1]
                edits.append((at, at, f"{source.indentation(first.lineno)}return {passthrough}\n"))
            else:
                returns = ast.unparse(function.returns) if function.returns else ""
                assert isinstance(node, ast.Return)
                if node.value is None:
                    raise TableError(f"{where}: a bare `return` has nothing to change")
                edits.append((*source.span(node.value), "True" if returns == "bool" else passthrough))
        elif word == "drop":
            numbers = operator.argument.split()
            if not numbers:
                raise TableError(f"{where}: `drop` names the operands to leave out, from 0")
            container = node if isinstance(node, ast.BoolOp | ast.Tuple | ast.List) else value_of(node)
            if not isinstance(container, ast.BoolOp | ast.Tuple | ast.List):
                raise TableError(f"{where}: `drop` needs an and/or, a tuple or a list")
            for number in numbers:
                if not number.lstrip("-").isdigit():
                    raise TableError(f"{where}: `drop` takes operand numbers, not {number!r}")
                drop(container, int(number), where)
        elif word == "unwrap":
            call = value_of(node)
            if not isinstance(call, ast.Call) or not call.args:
                raise TableError(f"{where}: `unwrap` needs a call with an argument")
            inner = source.segment(call.args[0])
            alternative = operator.argument.removeprefix("or ").strip()
            edits.append((*source.span(call), f"({inner} or {alternative})" if alternative else inner))
        elif word == "orelse":
            conditional = value_of(node)
            if not isinstance(conditional, ast.IfExp):
                raise TableError(f"{where}: `orelse` needs `a if c else b`")
            edits.append((*source.span(conditional), source.segment(conditional.orelse)))
        elif word == "peek":
            edits.append(peek(source, start, end, where))
        elif word in ("before", "after"):
            if not isinstance(node, ast.stmt):
                raise TableError(f"{where}: `{word}` needs a statement")
            indent = source.indentation(node.lineno)
            line = source.starts[node.lineno - 1 if word == "before" else (node.end_lineno or node.lineno)]
            edits.append((line, line, f"{indent}{operator.argument}\n"))
        elif word == "replace":
            lines = source.line_span(node.lineno, node.end_lineno or node.lineno)  # type: ignore[attr-defined]
            edits.append(replace_once(source, *lines, operator.old, operator.new, where))
        else:
            raise TableError(f"{where}: `{word}` applies to configuration text, not to Python")

    for container, indices in dropped.items():
        items = container.values if isinstance(container, ast.BoolOp) else container.elts  # type: ignore[attr-defined]
        kept = [source.segment(item) for number, item in enumerate(items) if number not in indices]
        if isinstance(container, ast.BoolOp):
            if not kept:
                raise TableError(f"line {container.lineno}: every operand dropped")
            joiner = " and " if isinstance(container.op, ast.And) else " or "
            text = joiner.join(kept)
        else:
            text = ", ".join(kept) + ("," if len(kept) == 1 and isinstance(container, ast.Tuple) else "")
            text = f"({text})" if isinstance(container, ast.Tuple) else f"[{text}]"
        edits.append((*source.span(container), text))
    return edits


TAKE_SQL = re.compile(r"DELETE FROM (?P<table>\w+) WHERE (?P<where>[^\"]*?) RETURNING (?P<columns>[^\"]*)")
TAKE_CALL = re.compile(r"\.(?:pop|getdel)\(")


def peek(source: Source, start: int, end: int, where: str) -> Edit:
    """A take (read and delete) becomes a read that leaves the value in place."""
    text = source.masked[start:end]
    found = list(TAKE_SQL.finditer(text)) + list(TAKE_CALL.finditer(text))
    if len(found) != 1:
        raise TableError(f"{where}: `peek` found {len(found)} takes in the marked statement, not one")
    match = found[0]
    if match.re is TAKE_SQL:
        read = f"SELECT {match['columns']} FROM {match['table']} WHERE {match['where']}"  # noqa: S608
    else:
        read = ".get("
    return (start + match.start(), start + match.end(), read)


def text_edits(source: Source, markers: Sequence[Marker]) -> list[Edit]:
    """Operators on a line of configuration or Lua: delete (with its block), substitute, ..."""
    edits: list[Edit] = []
    for marker in markers:
        where = f"{marker.id} ({marker.file}:{marker.line})"
        operator = parse_operator(marker.operator)
        line = marker.line
        if line > len(source.lines):
            raise TableError(f"{where}: the marker marks no line")
        content = source.lines[line - 1]
        start, end = source.line_span(line, line)
        if operator.word in ("", "delete"):
            edits.append((start, source.line_span(line, block_end(source, line))[1], ""))
        elif operator.word == "replace":
            edits.append(replace_once(source, start, end, operator.old, operator.new, where))
        elif operator.word == "true":
            match = re.match(r"(\s*if\s+)(.*?)(\s+then\b)", content)
            if match is None:
                raise TableError(f"{where}: `true` on a text line needs `if ... then`")
            edits.append((start + match.end(1), start + match.start(3), "true"))
        elif operator.word == "unpin":
            match = re.search(r"@sha256:[0-9a-f]{64}", content)
            if match is None:
                raise TableError(f"{where}: `unpin` found no @sha256: digest")
            edits.append((start + match.start(), start + match.end(), ""))
        elif operator.word == "peek":
            edits.append(peek(source, start, end, where))
        elif operator.word == "swap-up":
            above = line - 1
            while above > 0 and is_marker_line(source.lines[above - 1]):
                above -= 1
            if above == 0:
                raise TableError(f"{where}: no line above to swap with")
            first = source.line_span(above, above)
            edits.append((first[0], first[1], content))
            edits.append((start, end, source.lines[above - 1]))
        elif operator.word == "after":
            edits.append((end, end, operator.argument.rstrip("\n") + "\n"))
        elif operator.word == "before":
            edits.append((start, start, operator.argument.rstrip("\n") + "\n"))
        else:
            raise TableError(f"{where}: `{operator.word}` applies to Python, not to a line of text")
    return edits


def block_end(source: Source, line: int) -> int:
    """The last line of the block `line` opens: to the matching `}` (nginx), or over the lines
    indented deeper than a `key:` line (YAML); else `line` itself."""
    content = source.lines[line - 1].rstrip()
    if content.endswith("{"):
        depth = 0
        for number in range(line, len(source.lines) + 1):
            depth += source.lines[number - 1].count("{") - source.lines[number - 1].count("}")
            if depth <= 0:
                return number
        raise TableError(f"line {line}: the block never closes")
    if content.endswith(":") and not content.lstrip().startswith(("#", "-")):
        depth = len(content) - len(content.lstrip())
        number = line
        while number < len(source.lines):
            below = source.lines[number]
            if below.strip() and len(below) - len(below.lstrip()) <= depth:
                break
            number += 1
        return number
    return line


def mutated_files(root: Path, markers: Sequence[Marker]) -> dict[str, tuple[bytes, bytes]]:
    """{file: (original, mutated)} for the markers of one check; TableError when an operator does
    not apply or the mutant does not compile."""
    result = {}
    for file in sorted({m.file for m in markers}):
        path = root / file
        original = path.read_bytes()
        source = Source(original.decode("utf-8"))
        here = [m for m in markers if m.file == file]
        edits = text_edits(source, [m for m in here if not m.python])
        if any(m.python for m in here):
            edits += python_edits(source, ast.parse(source.text), [m for m in here if m.python])
        text = apply_edits(source.text, edits, f"{here[0].id} ({file})")
        if text == source.text:
            raise TableError(f"{here[0].id}: the mutant of {file} is the original")
        if path.suffix == ".py":  # the proxy's configuration is checked by its own tests (nginx -t)
            try:
                compile(text, str(path), "exec")
            except SyntaxError as exc:
                raise TableError(f"{here[0].id}: the mutated {file} does not compile ({exc})") from None
        result[file] = (original, text.encode("utf-8"))
    return result


class RestoreError(Exception):
    """A mutated file could not be put back exactly as it was."""


class Interrupted(Exception):
    """SIGTERM or SIGHUP: unwind through every `finally` so the file is restored."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` in one rename, keeping its mode: a reader sees the old or the new file, whole."""
    mode = path.stat().st_mode
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".mutation-tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


@contextlib.contextmanager
def mutated(root: Path, mutant: dict[str, tuple[bytes, bytes]]) -> Iterator[None]:
    """Write each file's mutant; always restore the original bytes and check them by SHA-256."""
    with contextlib.ExitStack() as stack:
        for file, (original, mutated_bytes) in mutant.items():
            stack.enter_context(mutated_file(root / file, file, original, mutated_bytes))
        yield


@contextlib.contextmanager
def mutated_file(path: Path, file: str, original: bytes, mutant: bytes) -> Iterator[None]:
    original_hash, mutant_hash = sha256(original), sha256(mutant)
    write_atomically(path, mutant)
    try:
        yield
    finally:
        current = path.read_bytes() if path.exists() else b""
        if sha256(current) not in (mutant_hash, original_hash):
            # Someone else wrote the file meanwhile: do not overwrite their version.
            backup = Path(tempfile.mkdtemp(prefix="mutation-original-")) / path.name
            backup.write_bytes(original)
            raise RestoreError(
                f"{file} changed during the run (not by this script); it was NOT restored. "
                f"The original is saved at {backup}; compare it with the file and with `git diff`."
            )
        if sha256(current) == mutant_hash:
            write_atomically(path, original)
            # A .pyc of the mutant (if anything wrote one) must not match the restored file.
            if path.stat().st_mtime_ns // 10**9 == int(time.time()):
                stamp = time.time() + 1
                os.utime(path, (stamp, stamp))
        restored = sha256(path.read_bytes())
        if restored != original_hash:
            raise RestoreError(f"{file}: restored content hash {restored} != original {original_hash}")


@dataclasses.dataclass
class Outcome:
    check: Check
    markers: tuple[Marker, ...]
    status: str  # CAUGHT, NOT CAUGHT, ERROR, TIMEOUT
    failed: list[str]
    seconds: float
    detail: str = ""


def junit_failures(report: Path) -> list[str]:
    """Node ids of failed or errored tests in a JUnit XML report."""
    if not report.exists():
        return []
    failed = []
    # The report is the one our own pytest run just wrote into a private temporary directory.
    for case in ET.parse(report).getroot().iter("testcase"):  # noqa: S314
        if case.find("failure") is None and case.find("error") is None:
            continue
        module, name = case.get("classname", ""), case.get("name", "")
        parts = module.split(".")
        # classname is "tests.unit.test_x" or "tests.unit.test_x.TestClass"
        for cut in range(len(parts), 0, -1):
            candidate = "/".join(parts[:cut]) + ".py"
            if (ROOT / candidate).exists() or cut == 1:
                node = "::".join([candidate, *parts[cut:], name])
                break
        failed.append(node)
    return failed


def pytest_env(root: Path, copy: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["CI"] = "true"  # tests whose service is missing fail instead of skipping
    env["PYTHONDONTWRITEBYTECODE"] = "1"  # never cache a mutant's bytecode
    if copy:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(root), env.get("PYTHONPATH", "")]))
    return env


def run_pytest(
    python: str, root: Path, tests: Sequence[str], timeout: float, copy: bool
) -> tuple[int | None, list[str], str]:
    """(exit code or None on timeout, failed node ids, output tail)."""
    with tempfile.TemporaryDirectory(prefix="mutation-junit-") as tmp:
        report = Path(tmp) / "report.xml"
        command = [
            python,
            "-m",
            "pytest",
            "-x",
            "-q",
            "-p",
            "no:cacheprovider",
            "--tb=native",  # pytest's own traceback rendering can crash on some failures (exit 3)
            f"--junitxml={report}",
            *tests,
        ]
        process = subprocess.Popen(  # noqa: S603 - our interpreter, pytest, and the table's test ids
            command,
            cwd=root,
            env=pytest_env(root, copy),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a timeout ends servers it started too
        )
        try:
            output, _ = process.communicate(timeout=timeout)
            code: int | None = process.returncode
        except subprocess.TimeoutExpired:
            code = None
        finally:
            if process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                output, _ = process.communicate()
        text = output.decode("utf-8", "replace")
        return code, junit_failures(report), "\n".join(text.strip().splitlines()[-25:])


def uncommitted(root: Path, files: Sequence[str]) -> list[str] | None:
    """Files among `files` with uncommitted changes, or None when git cannot tell."""
    git = shutil.which("git")
    if git is None:
        return None
    result = subprocess.run(  # noqa: S603 - git status, read only
        [git, "--no-optional-locks", "status", "--porcelain", "--untracked-files=all", "--", *files],
        cwd=root,
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        return None
    return [line[3:] for line in result.stdout.splitlines() if line.strip()]


IGNORED_IN_COPY = shutil.ignore_patterns(
    ".git",
    ".venv",
    "__pycache__",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".mcp-url-connect",
    "node_modules",
    "*.egg-info",
)


def make_copy(root: Path, into: Path) -> Path:
    copy = into / root.name
    shutil.copytree(root, copy, ignore=IGNORED_IN_COPY, symlinks=True)
    modules = root / "tests" / "integration" / "node" / "node_modules"
    if modules.is_dir():
        (copy / "tests" / "integration" / "node" / "node_modules").symlink_to(modules)
    return copy


def default_python() -> str:
    venv = ROOT / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def place(markers: Sequence[Marker]) -> str:
    """file:line (function) of a check's markers, for the printed tables."""
    return ", ".join(f"{m.file}:{m.line}" + (f" ({m.where})" if m.where else "") for m in markers)


def print_table(outcomes: Sequence[Outcome]) -> None:
    rows = [("check", "where", "result", "s")]
    for o in outcomes:
        if o.status == "CAUGHT":
            result = ", ".join(o.failed) if o.failed else "caught (no test id reported)"
        else:
            result = o.status + (f": {o.detail}" if o.detail else "")
        rows.append((o.check.id, place(o.markers), result, f"{o.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for number, row in enumerate(rows):
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[3]:>5}  {row[2]}")
        if number == 0:
            print(f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 5}  {'-' * min(widths[2], 60)}")


def select(names: Sequence[str] | None, markers: Sequence[Marker]) -> list[Check]:
    """The checks named by id, or by the function (`name` or `Class.method`) a marker sits in."""
    if not names:
        return list(CHECKS)
    wanted = [n.strip() for name in names for n in name.split(",") if n.strip()]
    known = {entry.id: entry for entry in CHECKS}
    chosen: list[Check] = []
    unknown = []
    for name in wanted:
        found = (
            [known[name]]
            if name in known
            else [
                known[m.id]
                for m in markers
                if m.id in known and (m.where == name or m.where.endswith("." + name))
            ]
        )
        if not found:
            unknown.append(name)
        chosen.extend(found)
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        raise SystemExit(2)
    return list(dict.fromkeys(chosen))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", metavar="NAME", help="run only this check (repeatable)")
    parser.add_argument("--list", action="store_true", help="list the checks and their tests, then exit")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds per pytest run (default 180)")
    parser.add_argument(
        "--force", action="store_true", help="run even if target files have uncommitted changes"
    )
    parser.add_argument(
        "--copy", action="store_true", help="mutate a temporary copy of the work tree, never the work tree"
    )
    parser.add_argument(
        "--no-baseline", action="store_true", help="skip the unmutated run of all selected tests"
    )
    parser.add_argument("--python", default=default_python(), help="interpreter with pytest (default .venv)")
    args = parser.parse_args(argv)

    # Every id must have its markers, and every marked statement an operator, before anything is
    # touched.
    try:
        markers = find_markers(ROOT)
    except (SyntaxError, UnicodeDecodeError) as exc:
        print(f"A file with markers cannot be read: {exc}", file=sys.stderr)
        return 2
    problems = validate(CHECKS, markers)
    if problems:
        print("The mutation table and the markers disagree (nothing was mutated):", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 2
    checks = select(args.only, markers)
    marked = {entry.id: tuple(m for m in markers if m.id == entry.id) for entry in checks}
    for entry in checks:
        try:
            mutated_files(ROOT, marked[entry.id])
        except TableError as exc:
            problems.append(str(exc))
    if problems:
        print("A marked statement has no working operator (nothing was mutated):", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 2

    if args.list:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
        for entry in checks:
            for marker in marked[entry.id]:
                function = f"  {marker.where}" if marker.where else ""
                print(f"{entry.id:<40} {marker.file}:{marker.line}{function}")
            print(f"{'':<40}   removes: {entry.removes}")
            for test in entry.tests:
                print(f"{'':<40}   {test}")
        return 0

    files = sorted({m.file for entry in checks for m in marked[entry.id]})
    if not args.copy:
        dirty = uncommitted(ROOT, files)
        if dirty is None and not args.force:
            print(
                "Cannot tell from git whether the files to mutate are committed; use --force.",
                file=sys.stderr,
            )
            return 2
        if dirty and not args.force:
            print(
                "Refusing to mutate files with uncommitted changes "
                "(commit them, or use --force or --copy):\n  " + "\n  ".join(dirty),
                file=sys.stderr,
            )
            return 2

    def on_signal(signum: int, frame: object) -> None:
        raise Interrupted(signal.Signals(signum).name)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, on_signal)

    started = time.monotonic()
    outcomes: list[Outcome] = []
    with contextlib.ExitStack() as stack:
        root = ROOT
        if args.copy:
            root = make_copy(ROOT, Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="mutation-"))))
            print(f"working in a copy: {root}", flush=True)
        original_hashes = {f: sha256((root / f).read_bytes()) for f in files}

        if not args.no_baseline:
            union = list(dict.fromkeys(t for entry in checks for t in entry.tests))
            print(f"baseline: {len(union)} selections, unmutated ...", flush=True)
            t0 = time.monotonic()
            code, failed, tail = run_pytest(args.python, root, union, args.timeout * 2, args.copy)
            print(f"baseline: exit {code} in {time.monotonic() - t0:.1f}s", flush=True)
            if code != 0:
                print("The selected tests do not pass without mutations; fix that first:", file=sys.stderr)
                print("\n".join(failed) or tail, file=sys.stderr)
                return 2

        try:
            for number, entry in enumerate(checks, start=1):
                print(f"[{number}/{len(checks)}] {entry.id} ...", end=" ", flush=True)
                t0 = time.monotonic()
                runs = 0
                with mutated(root, mutated_files(root, marked[entry.id])):
                    while True:
                        runs += 1
                        code, failed, tail = run_pytest(
                            args.python, root, entry.tests, args.timeout, args.copy
                        )
                        if code != 0 or runs >= entry.attempts:
                            break
                seconds = time.monotonic() - t0
                if code == 1 and failed:
                    if entry.attempts > 1:
                        failed = [f"{failed[0]} (run {runs} of up to {entry.attempts})", *failed[1:]]
                    outcome = Outcome(entry, marked[entry.id], "CAUGHT", failed, seconds)
                elif code == 0:
                    detail = f"in {runs} runs" if runs > 1 else ""
                    outcome = Outcome(entry, marked[entry.id], "NOT CAUGHT", [], seconds, detail)
                elif code is None:
                    outcome = Outcome(
                        entry, marked[entry.id], "TIMEOUT", failed, seconds, f"after {args.timeout:.0f}s"
                    )
                else:
                    outcome = Outcome(
                        entry, marked[entry.id], "ERROR", failed, seconds, f"pytest exit {code}"
                    )
                    print(f"\n{tail}", file=sys.stderr)
                outcomes.append(outcome)
                print(f"{outcome.status} ({seconds:.1f}s)", flush=True)
        except (KeyboardInterrupt, Interrupted) as exc:
            print(
                f"\ninterrupted ({type(exc).__name__} {exc}); the mutated file was restored", file=sys.stderr
            )
            return 130
        except RestoreError as exc:
            print(f"\nRESTORE FAILED: {exc}", file=sys.stderr)
            return 3
        finally:
            for name, digest in original_hashes.items():
                if sha256((root / name).read_bytes()) != digest:
                    print(
                        f"CHECK: {name} differs from its content when the run started "
                        "(not restored, or changed by someone else meanwhile); see `git diff`",
                        file=sys.stderr,
                    )

    elapsed = time.monotonic() - started
    print()
    print_table(outcomes)
    missed = [o for o in outcomes if o.status != "CAUGHT"]
    print(
        f"\n{len(outcomes) - len(missed)}/{len(outcomes)} checks caught in {elapsed:.0f}s"
        + (" (mutations applied to a temporary copy)" if args.copy else "")
    )
    if missed:
        print("not caught: " + ", ".join(o.check.id for o in missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
