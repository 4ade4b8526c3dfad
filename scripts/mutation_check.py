#!/usr/bin/env python3
"""Mutation check for the security checks of docs/threat-model.md.

Every mitigation needs a test that fails if it is removed. This script removes each
security check in turn by an exact textual patch (`old` -> `new`, each `old` found exactly once in
one file), runs the tests selected for that check (`pytest -x -q -p no:cacheprovider`, env
`CI=true`), records which test failed, restores the file and prints a table:

    check -> file -> the test that failed (or NOT CAUGHT)

Before mutating anything it runs every selected test once unmutated (the baseline; skip with
--no-baseline): a test that already fails would otherwise count as a catch. It exits non-zero
when any check is not caught. The table lives in MUTATIONS below; a patch whose
`old` text is missing or ambiguous stops the run before anything is touched, so the table cannot
silently rot when the code changes: update the snippet, keep the check.

Safety: a mutated file never stays behind. Each file is restored in a `finally` (also on Ctrl-C,
SIGTERM or SIGHUP) and its SHA-256 is compared with the original; a mismatch is reported loudly
(exit 3). The run refuses to start when a file it would mutate has uncommitted changes (read with
`git status`, which changes nothing), unless --force. With --copy, the mutations are applied to a
throwaway copy of the work tree in a temporary directory and the work tree is never written, which
is the mode to use while other people run tests in the same checkout.

    .venv/bin/python scripts/mutation_check.py            # all checks (about 3 minutes on 2 cores)
    .venv/bin/python scripts/mutation_check.py --list
    .venv/bin/python scripts/mutation_check.py --only bearer.typ_at_jwt --only require_same_user
    .venv/bin/python scripts/mutation_check.py --copy     # never writes the work tree

Exit codes: 0 every check caught; 1 some check not caught (or its run errored or timed out);
2 refused or invalid table (nothing was mutated); 3 a file could not be restored to its original.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import hashlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# --------------------------------------------------------------------------------------------------
# The table. One entry per check: the smallest test selection that catches its removal (fast unit
# tests where they exist; end-to-end tests only where nothing else covers the check).
# --------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Mutation:
    name: str
    file: str
    patches: tuple[tuple[str, str], ...]  # (old, new); every `old` occurs exactly once in `file`
    tests: tuple[str, ...]  # pytest node ids or files
    removes: str  # what the patch disables, in a few words
    # Runs of the selection while mutated; more than 1 only where the catching test is a race that
    # notices the mutant with some probability per run. Caught as soon as one run fails.
    attempts: int = 1


def m(
    name: str, file: str, old: str, new: str, tests: Sequence[str], removes: str, attempts: int = 1
) -> Mutation:
    return Mutation(name, file, ((old, new),), tuple(tests), removes, attempts)


E2E_FLOW = "tests/e2e/test_connect_flow.py"
E2E_HARD = "tests/e2e/test_connect_hardening.py"
E2E_CHROMIUM = "tests/e2e/test_chromium.py"
E2E_STATE = "tests/e2e/test_request_state.py"
SEC_BROWSER = "tests/security/test_browser.py"
BEARER = "tests/unit/test_bearer.py"
CONTRACT = "tests/unit/test_store_contract.py"
UNIT_CHECKS = "tests/unit/test_security_checks.py"
UNIT_ROUTES = "tests/unit/test_connect_routes.py"
UNIT_ACCOUNTS = "tests/unit/test_account_choice.py"

MUTATIONS: tuple[Mutation, ...] = (
    # ---- service/security_checks.py, service/connect_flow.py, connect_routes/connect.py ---------
    m(
        "require_same_user",
        "service/security_checks.py",
        "    if browser_user != owner:\n",
        "    if False:\n",
        [f"{E2E_FLOW}::test_another_user_gets_403_and_nothing_is_stored"],
        "browser user == elicitation user (GET/POST /connect and the callback)",
    ),
    m(
        "require_same_browser",
        "service/security_checks.py",
        "    if session_binding is None or not hmac.compare_digest(session_binding, state_binding):\n",
        "    if False:\n",
        [f"{E2E_FLOW}::test_callback_in_another_browser_of_the_same_user_is_refused"],
        "callback only in the browser that passed POST /connect",
    ),
    m(
        "require_redirect_uri_of_provider",
        "service/security_checks.py",
        "    if configured is None or path_provider != configured.name:\n",
        "    if configured is None:\n",
        [f"{E2E_HARD}::test_callback_on_another_providers_redirect_uri_is_a_mixup"],
        "one redirect URI per provider (mix-up without iss)",
    ),
    m(
        "check_rfc9207_issuer",
        "service/security_checks.py",
        "    if expected is not None and received != expected:\n",
        "    if False:\n",
        [f"{E2E_FLOW}::test_rfc9207_issuer_mismatch_refuses_the_code"],
        "RFC 9207 iss compared before the code is redeemed",
    ),
    m(
        "require_csrf_token.connect_posts",
        "connect_routes/connect.py",
        '        check_csrf(request, form.get("csrf"), StaleConnectForm)\n',
        "",
        [
            f"{E2E_HARD}::test_confirmation_post_without_csrf_leaves_the_link_pending",
            f"{SEC_BROWSER}::test_csrf_on_api_key_entry",
            f"{SEC_BROWSER}::test_csrf_on_connect_cancel",
        ],
        "CSRF token on POST /connect, /connect/api-key and /connect/cancel (ConnectRoutes._posted)",
    ),
    m(
        "require_csrf_token.cancel",
        "connect_routes/connect.py",
        "        browser, _form, elicitation_id = await self._posted(request, max_part_size=1024)\n"
        "        link = await self._flow.check_link(browser.user, elicitation_id)\n"
        "        await self._flow.decline(link.elicitation.id)\n",
        "        browser = require_signed_in(browser_user(request, self._settings), NotSignedIn)\n"
        '        elicitation_id = str((await request.form()).get("elicitationId"))\n'
        "        link = await self._flow.check_link(browser.user, elicitation_id)\n"
        "        await self._flow.decline(link.elicitation.id)\n",
        [f"{UNIT_ROUTES}::test_cancel_declines_the_link_after_the_checks_of_post_connect"],
        "CSRF token on POST /connect/cancel (the cancel route without ConnectRoutes._posted)",
    ),
    m(
        "require_same_user.cancel",
        "connect_routes/connect.py",
        "        link = await self._flow.check_link(browser.user, elicitation_id)\n"
        "        await self._flow.decline(link.elicitation.id)\n",
        "        owner = await self._runtime.store.get_elicitation(elicitation_id)\n"
        "        link = await self._flow.check_link(owner.user if owner else browser.user, elicitation_id)\n"
        "        await self._flow.decline(link.elicitation.id)\n",
        [f"{UNIT_ROUTES}::test_cancel_declines_the_link_after_the_checks_of_post_connect"],
        "same user on POST /connect/cancel (check_link given the link's owner instead)",
    ),
    m(
        "require_pending",
        "service/security_checks.py",
        "    if elicitation.status is not ElicitationStatus.PENDING:\n",
        "    if False:\n",
        [
            f"{UNIT_ROUTES}::test_a_used_link_answers_409_on_get_and_post",
            "tests/security/test_ids_and_states.py::test_link_reused_after_completion_is_refused",
        ],
        "GET/POST /connect only while the elicitation is pending (single use of a link)",
    ),
    m(
        "require_first_open",
        "service/connect_flow.py",
        "        opened = require_first_open(await self._store().open_elicitation(state))\n",
        "        opened = await self._store().open_elicitation(state) or elicitation  # MUTANT\n",
        ["tests/unit/test_connect_routes.py::test_a_link_opens_once_even_when_two_visits_passed_the_check"],
        "POST /connect: PENDING->OPENED compare-and-set result honoured (racing POSTs)",
    ),
    m(
        "require_single_use_state",
        "service/security_checks.py",
        "    taken = await store.take_oauth_state(state)\n",
        "    taken = await store.take_oauth_state(state)\n"
        "    if taken is not None:  # MUTANT: a non-consuming read\n"
        "        await store.put_oauth_state(taken)  # type: ignore[attr-defined]\n",
        [f"{E2E_FLOW}::test_replayed_callback_is_rejected"],
        "callback consumes the OAuth state (single use) before any other check",
    ),
    m(
        "require_opaque_id",
        "service/security_checks.py",
        'OPAQUE_ID = re.compile(r"[A-Za-z0-9_-]{16,128}")',
        'OPAQUE_ID = re.compile(r".*")',
        [f"{UNIT_CHECKS}::test_require_opaque_id", f"{UNIT_ROUTES}::test_malformed_ids_get_400"],
        "elicitation ids and states must fullmatch OPAQUE_ID",
    ),
    # ---- login (service/security_checks.py) --------------------------------------------------------
    m(
        "require_safe_next",
        "service/security_checks.py",
        "    if isinstance(value, str) and _SAFE_NEXT.fullmatch(value):\n",
        "    if isinstance(value, str):\n",
        [f"{SEC_BROWSER}::test_login_next_cannot_leave_the_site"],
        "post-login redirect only to our own paths (open redirect)",
    ),
    m(
        "require_login_issuer",
        "service/security_checks.py",
        "    if iss != expected_issuer or not isinstance(sub, str) or not sub:\n",
        "    if not isinstance(iss, str) or not isinstance(sub, str) or not sub:\n",
        ["tests/unit/test_login_and_resume_checks.py::test_login_refuses_an_id_token_from_another_issuer"],
        "browser login only with an ID token from auth_issuer",
    ),
    # ---- the browser session (service/security_checks.py, connect_routes/browser_session.py) -------
    m(
        "rotate_session_on_login",
        "service/security_checks.py",
        "    session.clear()\n    session.update(\n",
        "    session.update(\n",
        [f"{SEC_BROWSER}::test_login_rotates_a_planted_session"],
        "a login clears everything from before it",
    ),
    m(
        "require_session_within_lifetime",
        "service/security_checks.py",
        "    if now - login_at > max_age:\n",
        "    if False:\n",
        [f"{SEC_BROWSER}::test_session_past_its_absolute_lifetime_is_signed_out"],
        "absolute session lifetime from login_at",
    ),
    m(
        "session.samesite_lax",
        "connect_routes/browser_session.py",
        'same_site="lax",',
        'same_site="none",',
        [f"{SEC_BROWSER}::test_session_cookie_attributes_on_loopback_http"],
        "SameSite=Lax on the session cookie",
    ),
    m(
        "session.host_prefix",
        "connect_routes/browser_session.py",
        'return "__Host-mcpuc_session" if settings.secure_cookies else "mcpuc_session"',
        'return "mcpuc_session"',
        [f"{SEC_BROWSER}::test_session_cookie_is_host_prefixed_and_secure_under_https"],
        "__Host- cookie name under https",
    ),
    m(
        "session.secure_flag",
        "connect_routes/browser_session.py",
        "https_only=settings.secure_cookies,",
        "https_only=False,",
        [f"{SEC_BROWSER}::test_session_cookie_is_host_prefixed_and_secure_under_https"],
        "Secure on the session cookie under https",
    ),
    m(
        "require_csrf_token",
        "service/security_checks.py",
        "        and isinstance(submitted, str)\n"
        '        and hmac.compare_digest(expected.encode(), submitted.encode(errors="surrogatepass"))\n',
        "",
        [f"{E2E_HARD}::test_confirmation_post_without_csrf_leaves_the_link_pending"],
        "require_csrf_token compares the submitted token",
    ),
    # ---- connect_routes/connections_page.py, headers.py -------------------------------------------
    m(
        "require_csrf_token.disconnect",
        "connect_routes/connections_page.py",
        '        check_csrf(request, form.get("csrf"))\n',
        "",
        [f"{SEC_BROWSER}::test_csrf_on_disconnect", f"{SEC_BROWSER}::test_csrf_on_default_account"],
        "CSRF token on POST /connections/disconnect and /connections/default",
    ),
    m(
        "headers.security_headers",
        "connect_routes/headers.py",
        "                for name, value in HEADERS.items():\n",
        "                for name, value in ():\n",
        [f"{E2E_CHROMIUM}::test_pages_send_security_headers"],
        "CSP, frame-ancestors, no-referrer, no-store, nosniff on every response",
    ),
    # ---- service/bearer.py ------------------------------------------------------------------------
    m(
        "bearer.algorithm_allow_list",
        "service/bearer.py",
        'if header.get("alg") not in self._algorithms:',
        "if False:",
        [f"{BEARER}::test_disallowed_algorithm_is_refused_before_any_fetch"],
        "alg from the allow-list before any key work",
    ),
    m(
        "bearer.forbidden_headers",
        "service/bearer.py",
        'FORBIDDEN_HEADERS = ("jku", "jwk", "x5u", "x5c")',
        "FORBIDDEN_HEADERS: tuple[str, ...] = ()",
        [f"{BEARER}::test_key_carrying_headers_are_rejected_without_fetching"],
        "jku/jwk/x5u/x5c refused",
    ),
    m(
        "bearer.typ_at_jwt",
        "service/bearer.py",
        'if self._require_at_jwt and str(header.get("typ", "")).lower() not in ACCESS_TOKEN_TYPES:',
        "if False:",
        [f"{BEARER}::test_invalid_tokens_are_rejected"],
        "typ at+jwt (RFC 9068)",
    ),
    m(
        "bearer.audience",
        "service/bearer.py",
        'options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True},',
        'options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True, "verify_aud": False},',
        [f"{BEARER}::test_invalid_tokens_are_rejected"],
        "aud = <public_url>/mcp",
    ),
    m(
        "bearer.issuer",
        "service/bearer.py",
        'options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True},',
        'options={"require": ["exp", "iss", "aud", "sub"], "verify_nbf": True, "verify_iss": False},',
        [f"{BEARER}::test_invalid_tokens_are_rejected"],
        "iss = auth_issuer",
    ),
    m(
        "bearer.max_token_length",
        "service/bearer.py",
        "if len(token) > MAX_TOKEN_LENGTH:",
        "if False:",
        [
            f"{BEARER}::test_oversized_token_is_refused_before_any_fetch",
            f"{BEARER}::test_garbage_longer_than_the_limit_is_refused_before_any_fetch",
        ],
        "MAX_TOKEN_LENGTH before any JOSE work",
    ),
    m(
        "bearer.sub",
        "service/bearer.py",
        'if not isinstance(claims.get("sub"), str) or not claims["sub"] or len(claims["sub"]) > 255:',
        "if False:",
        [f"{BEARER}::test_invalid_tokens_are_rejected"],
        "sub a non-empty string of at most 255 characters",
    ),
    # ---- service/security_checks.py (broker), mcp_errors.py, revision.py, completion.py, ... ------
    m(
        "require_single_use_request_state",
        "service/security_checks.py",
        "    if not await store.take_nonce(nonce):\n",
        "    if False:\n",
        [f"{E2E_STATE}::test_request_state_is_single_use"],
        "requestState nonce taken once",
    ),
    m(
        "require_request_state_for_provider",
        "service/security_checks.py",
        "    if state_provider != provider:\n",
        "    if False:\n",
        [
            "tests/unit/test_login_and_resume_checks.py"
            "::test_request_state_for_another_provider_is_refused_before_its_nonce_is_used"
        ],
        "requestState names the provider of this require()",
    ),
    m(
        "require_offered_account",
        "service/security_checks.py",
        "    if not isinstance(answer, str) or answer not in offered:\n",
        "    if False:\n",
        [
            f"{UNIT_ACCOUNTS}::test_an_answer_naming_another_users_account_is_refused",
            f"{UNIT_ACCOUNTS}::test_an_answer_that_was_not_offered_is_refused",
            f"{UNIT_ACCOUNTS}::test_modern_account_answer_is_checked_against_the_callers_accounts",
        ],
        "a form answer is one of the caller's accounts offered (or 'connect another')",
    ),
    m(
        "supports_form_elicitation",
        "service/revision.py",
        "    return elicitation.form is not None or elicitation.url is None\n",
        "    return True\n",
        [
            f"{UNIT_ACCOUNTS}::test_supports_form_elicitation",
            f"{UNIT_ACCOUNTS}::test_without_form_support_the_most_recent_is_used_and_named",
        ],
        "no form-mode elicitation to a client that did not declare it",
    ),
    m(
        "request_state_kind",
        "service/broker.py",
        "            if fields[3] not in _STATE_KINDS:\n",
        "            if False:\n",
        [f"{UNIT_ACCOUNTS}::test_unknown_kind_is_an_invalid_state"],
        "a requestState names a question this server asks (connect or account)",
    ),
    m(
        "one_open_account_question",
        "service/broker.py",
        'state = _RequestState("", await self._new_nonce(caller.user, slot), config.name, ACCOUNT_KIND)',
        'state = _RequestState("", await self._new_nonce(caller.user, None), config.name, ACCOUNT_KIND)',
        [
            f"{UNIT_ACCOUNTS}::test_modern_asking_again_replaces_the_open_questions_nonce",
            "tests/security/test_abuse.py::test_flood_of_account_questions_holds_one_nonce_per_user",
        ],
        "one live nonce per user's open 'which account?' at a provider",
    ),
    m(
        "build_mcp_server.request_state_ttl",
        "service/app.py",
        "            keys=settings.request_state_key_list(), ttl=settings.elicitation_ttl\n",
        "            keys=settings.request_state_key_list()\n",
        ["tests/security/test_request_state.py::test_request_state_lives_as_long_as_the_flow_it_resumes"],
        "requestState sealed for elicitation_ttl (not the SDK's 600 s)",
    ),
    m(
        "as_mcp_error.store_unavailable",
        "service/mcp_errors.py",
        "    if isinstance(error, StoreUnavailable):\n"
        "        return MCPError(code=INTERNAL_ERROR, message=STORE_DOWN)\n",
        "",
        ["tests/e2e/test_store_faults.py::test_store_down_fails_closed_and_recovers"],
        "store failure -> JSON-RPC -32603 (fail closed)",
    ),
    m(
        "revision.url_capability",
        "service/revision.py",
        "    return elicitation is not None and elicitation.url is not None\n",
        "    return True\n",
        [f"{E2E_FLOW}::test_client_without_url_mode_gets_a_fallback_result"],
        "URL mode only for clients that declared elicitation.url",
    ),
    m(
        "completion.session_match",
        "service/completion.py",
        "if entry.elicitation.mcp_session_id != elicitation.mcp_session_id:",
        "if False:",
        ["tests/unit/test_completion.py::test_a_record_naming_another_session_is_not_delivered"],
        "completion only to the MCP session named by the record",
    ),
    Mutation(
        "sse_resumption.store_per_session",
        "service/sse_resumption.py",
        (
            (
                "    manager.give_each_session_a_store(lambda: SessionEventStore(max_events))\n",
                "    shared = SessionEventStore(max_events)  # MUTANT\n"
                "    manager.give_each_session_a_store(lambda: shared)\n",
            ),
        ),
        (
            "tests/unit/test_sse_resumption.py::"
            "test_a_dropped_stream_is_replayed_from_its_last_event_id_within_its_own_session",
        ),
        "SSE replay only within the session (and user) whose stream it was",
    ),
    m(
        "broker.resume_named_account",
        "service/broker.py",
        "        if account is not None:\n            stored = await self._find(caller, config, account)\n",
        "        if False:\n            stored = await self._find(caller, config, account)\n",
        [
            "tests/unit/test_resume_decline.py::"
            "test_a_retry_naming_an_account_the_flow_did_not_connect_asks_again"
        ],
        "a 2026-07-28 retry answers only with the account the tool named",
    ),
    m(
        "provider_session.own_url",
        "service/provider_session.py",
        "        if origin(url) not in allowed:\n",
        "        if False:\n",
        ["tests/unit/test_provider_session.py::test_the_token_never_goes_to_another_host"],
        "a provider token goes only to that provider's own hosts",
    ),
    # ---- service/settings.py, providers.py, redaction.py, provider_oauth.py ----------------------
    m(
        "settings.https_outside_loopback",
        "service/settings.py",
        "    if not https_unless_loopback(settings.public_url):\n",
        "    if False:\n",
        ["tests/unit/test_settings.py::test_plain_http_is_refused_outside_loopback"],
        "public_url https unless loopback",
    ),
    m(
        "require_tls_to_redis_unless_loopback",
        "service/settings.py",
        "    if url.scheme.lower() in plain and not local and not settings.allow_plaintext_redis:\n",
        "    if False:\n",
        [
            "tests/unit/test_settings.py::test_plain_redis_is_refused_outside_loopback",
            "tests/security/test_leakage.py::test_serve_refuses_plain_redis_to_another_host",
        ],
        "plain redis:// only to loopback unless MCPUC_ALLOW_PLAINTEXT_REDIS",
    ),
    m(
        "settings.no_hs_or_none",
        "service/settings.py",
        'if algorithm.lower() == "none" or algorithm.upper().startswith("HS"):',
        "if False:",
        ["tests/unit/test_settings.py::test_validate_rejects"],
        "auth_algorithms never none or HS*",
    ),
    m(
        "providers.https_endpoints",
        "service/providers.py",
        "if url and not _acceptable_url(url, provider.insecure_http):",
        "if False:",
        ["tests/unit/test_providers.py::test_plain_http_only_on_loopback_unless_explicitly_allowed"],
        "provider endpoints https unless loopback or insecure_http",
    ),
    m(
        "providers.discovery_s256",
        "service/providers.py",
        'if isinstance(methods, list) and "S256" not in methods:',
        "if False:",
        ["tests/unit/test_providers.py::test_discovery_refuses_a_provider_without_s256"],
        "discovery refuses a provider without PKCE S256",
    ),
    m(
        "redaction.redact",
        "service/redaction.py",
        "def redact(text: str) -> str:\n",
        "def redact(text: str) -> str:\n    return text  # MUTANT: nothing is redacted\n",
        ["tests/unit/test_redaction.py::test_redact_removes_secrets"],
        "secrets redacted from every log line",
    ),
    m(
        "provider_oauth.pkce_s256",
        "service/provider_oauth.py",
        '"code_challenge_method": "S256",',
        '"code_challenge_method": "plain",',
        [f"{E2E_FLOW}::test_legacy_full_flow"],
        "PKCE S256 toward providers",
    ),
    # ---- token_store ------------------------------------------------------------------------------
    Mutation(
        "crypto.associated_data",
        "token_store/crypto.py",
        (
            (
                "self._aeads[self._primary].encrypt(nonce, plaintext, associated_data)",
                'self._aeads[self._primary].encrypt(nonce, plaintext, b"")',
            ),
            (
                "aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], associated_data)",
                'aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], b"")',
            ),
        ),
        ("tests/unit/test_crypto.py::test_wrong_associated_data_fails",),
        "AEAD seals and opens with the record's associated data",
    ),
    m(
        "store.connection_binding",
        "token_store/models.py",
        '            ["conn", self.user.iss, self.user.sub, self.provider, self.account], '
        'separators=(",", ":")\n',
        '            ["conn"], separators=(",", ":")\n',
        [f"{CONTRACT}::test_record_moved_under_another_key_reads_as_absent"],
        "associated data = (iss, sub, provider, account) of the record",
    ),
    m(
        "sqlite.take_oauth_state",
        "token_store/sqlite.py",
        '"DELETE FROM oauth_states WHERE key = ? RETURNING blob, expires_at", (key,)',
        '"SELECT blob, expires_at FROM oauth_states WHERE key = ?", (key,)',
        [f"{CONTRACT}::test_oauth_state_single_use[sqlite]"],
        "OAuth state taken once (DELETE ... RETURNING)",
    ),
    m(
        "sqlite.take_nonce",
        "token_store/sqlite.py",
        '"DELETE FROM nonces WHERE key = ? RETURNING expires_at", (key,)',
        '"SELECT expires_at FROM nonces WHERE key = ?", (key,)',
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[sqlite]"],
        "requestState nonce taken once",
    ),
    m(
        "sqlite.nonce_slot",
        "token_store/sqlite.py",
        '_ADDED_INDEXES = ("CREATE UNIQUE INDEX IF NOT EXISTS nonces_slot ON nonces (slot)",)',
        '_ADDED_INDEXES = ("CREATE INDEX IF NOT EXISTS nonces_slot ON nonces (slot)",)',
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[sqlite]"],
        "a nonce slot holds one live nonce (unique index, INSERT OR REPLACE)",
    ),
    m(
        "postgres.nonce_slot",
        "token_store/postgres.py",
        "                codec.lookup_key(slot),\n",
        "                None,\n",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[postgres]"],
        "a nonce slot holds one live nonce (the slot's row takes the new nonce)",
    ),
    m(
        "sqlite.pending_limit",
        "token_store/sqlite.py",
        '"AND status IN (SELECT value FROM json_each(:live)) AND expires_at > :now) < :max_live",',
        '"AND status IN (SELECT value FROM json_each(:live)) AND expires_at > :now) >= 0",',
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[sqlite]"],
        "TooManyPending at max_pending_per_user",
    ),
    m(
        "sqlite.transition_cas",
        "token_store/sqlite.py",
        '"WHERE id = :id AND status = :expected AND expires_at > :now RETURNING record",',
        '"WHERE id = :id AND expires_at > :now RETURNING record",',
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[sqlite]"],
        "transition is a compare-and-set on the status",
    ),
    m(
        "sqlite.release_lock_owner",
        "token_store/sqlite.py",
        '"DELETE FROM locks WHERE name_hash = ? AND owner = ? RETURNING expires_at",\n'
        "                (codec.lookup_key(name), owner),",
        '"DELETE FROM locks WHERE name_hash = ? RETURNING expires_at",\n'
        "                (codec.lookup_key(name),),",
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[sqlite]"],
        "a lock is released only by its owner",
    ),
    m(
        "sqlite.open_elicitation_single_use",
        "token_store/sqlite.py",
        "            opened = transition(conn)\n            if opened is not None:\n"
        "                _insert_state(conn, key, blob, state.expires_at)\n",
        "            opened = transition(conn)\n"
        "            _insert_state(conn, key, blob, state.expires_at)\n",
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[sqlite]"],
        "open_elicitation stores a state only when it opened the elicitation",
    ),
    m(
        "redis.take_oauth_state",
        "token_store/redis_store.py",
        "blob = await client.getdel(self._keys.state(state, digest))",
        "blob = await client.get(self._keys.state(state, digest))",
        [f"{CONTRACT}::test_oauth_state_single_use[redis]"],
        "OAuth state taken once (GETDEL)",
    ),
    m(
        "redis.take_nonce",
        "token_store/redis_store.py",
        "expires_at = await client.getdel(self._keys.nonce(nonce, codec.lookup_key(nonce)))",
        "expires_at = await client.get(self._keys.nonce(nonce, codec.lookup_key(nonce)))",
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[redis]"],
        "requestState nonce taken once (GETDEL)",
    ),
    m(
        "redis.nonce_slot",
        "token_store/redis_store.py",
        "  redis.call('DEL', ARGV[3] .. old)\n",
        "",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[redis]"],
        "a nonce slot holds one live nonce (the slot's last nonce deleted in the script)",
    ),
    m(
        "redis.nonce_slot_cluster",
        "token_store/redis_store.py",
        "  if KEYS[3] and old ~= ARGV[4] then redis.call('DEL', KEYS[3]) end\n",
        "",
        [f"{CONTRACT}::test_a_nonce_slot_holds_one_live_nonce[cluster]"],
        "on Cluster too, a nonce slot holds one live nonce (the declared old nonce deleted)",
    ),
    m(
        "redis.pending_limit",
        "token_store/redis_store.py",
        "if live >= tonumber(ARGV[2]) then return {0, live} end\n",
        "",
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[redis]"],
        "TooManyPending at max_pending_per_user (Lua)",
    ),
    m(
        "redis.transition_cas",
        "token_store/redis_store.py",
        "if cur[1] ~= ARGV[1] or not cur[2] or tonumber(cur[2]) <= tonumber(ARGV[3]) then return false end",
        "if not cur[2] or tonumber(cur[2]) <= tonumber(ARGV[3]) then return false end",
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[redis]"],
        "transition is a compare-and-set on the status (Lua)",
    ),
    m(
        "redis.release_lock_owner",
        "token_store/redis_store.py",
        "if redis.call('GET', KEYS[1]) == ARGV[1] then\n  redis.call('DEL', KEYS[1])",
        "if true then\n  redis.call('DEL', KEYS[1])",
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[redis]"],
        "a lock is released only by its owner (Lua)",
    ),
    m(
        "redis.open_elicitation_single_use",
        "token_store/redis_store.py",
        "if not record then return {0} end\nredis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[8])\n",
        "redis.call('SET', KEYS[2], ARGV[7], 'PX', ARGV[8])\nif not record then return {0} end\n",
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[redis]"],
        "open_elicitation stores a state only when it opened the elicitation (Lua)",
    ),
    # ---- operability: caps, log and label hygiene, the proxy ----------------------------------------
    m(
        "SessionLimits.sessions_per_user",
        "service/session_limits.py",
        "        if held >= self.sessions_per_user:\n",
        "        if False:\n",
        [
            "tests/unit/test_session_limits.py::test_sessions_per_user_are_capped_with_429_and_other_users_are_unaffected"
        ],
        "cap on 2025-11-25 sessions per user (429)",
    ),
    m(
        "SessionLimits.sessions_per_replica",
        "service/session_limits.py",
        "        if len(owners) >= self.sessions_per_replica:\n",
        "        if False:\n",
        ["tests/unit/test_session_limits.py::test_sessions_per_replica_are_capped"],
        "cap on sessions per replica (429)",
    ),
    Mutation(
        "SessionLimits.admit_within_session_caps",
        "service/session_limits.py",
        (
            # The caps counted as the request arrives, before the SDK admits it (an await between).
            ("        manager.add_admission_check(wrapper.require_room_for_a_session)\n", ""),
            (
                "        try:\n            await self._app(scope, receive, send)\n",
                "        try:\n"
                '            opening = not any(n == b"mcp-session-id" for n, _ in scope["headers"])\n'
                "            if opening and (user := user_of(scope)) is not None:\n"
                '                self.require_room_for_a_session({"issuer": user[0], "subject": user[1]})\n'
                "            await self._app(scope, receive, send)\n",
            ),
        ),
        (
            "tests/unit/test_session_limits.py::test_concurrent_initializes_of_one_user_are_admitted_up_to_the_cap_only",
            "tests/security/test_session_caps.py::test_concurrent_initializes_of_one_user_cannot_race_past_the_cap",
        ),
        "session caps counted and admitted in one step (inside the SDK's admission)",
    ),
    m(
        "require_single_valued_headers",
        "service/single_valued_headers.py",
        "        if repeated is None:\n",
        "        if True:\n",
        [
            "tests/unit/test_single_valued_headers.py",
            "tests/security/test_session_caps.py::test_a_repeated_protocol_version_is_refused_before_any_session_opens",
        ],
        "a request repeating a single-valued header field gets 400 before anything reads it",
    ),
    m(
        "check_sdk_hooks",
        "service/sdk_hooks.py",
        "    if missing:\n",
        "    if False:\n",
        [
            "tests/unit/test_sdk_hooks.py::test_a_missing_hook_is_named",
            "tests/unit/test_sdk_hooks.py::test_no_server_is_built_on_an_sdk_without_a_hook",
        ],
        "a server refuses an SDK that lacks a private part the caps or the replay isolation need",
    ),
    m(
        "SessionLimits.requests_per_user",
        "service/session_limits.py",
        "        if self._in_flight[user] >= self.requests_per_user:\n",
        "        if False:\n",
        ["tests/unit/test_session_limits.py::test_requests_in_flight_per_user_are_capped"],
        "cap on requests in progress per user (429)",
    ),
    m(
        "BoundedHeadH11Protocol.head_timeout",
        "service/server_runtime.py",
        "        self._head_timer = self.loop.call_later(self.head_timeout, self._close_waiting)\n",
        "        self._head_timer = None\n",
        [
            "tests/unit/test_server_runtime.py::test_a_slow_head_is_closed_and_a_prompt_client_is_served_meanwhile"
        ],
        "a connection whose request head is not complete in time is closed",
    ),
    m(
        "BoundedHeadH11Protocol.max_waiting",
        "service/server_runtime.py",
        "        while len(self.waiting) > self.max_waiting:\n",
        "        while False:\n",
        ["tests/unit/test_server_runtime.py::test_at_most_max_connections_wait_for_a_head"],
        "at most max_connections_awaiting_head connections wait for a head (oldest closed first)",
    ),
    m(
        "request_id_from",
        "service/request_id.py",
        "    if value is not None and REQUEST_ID_SHAPE.fullmatch(value):\n",
        "    if value is not None:\n",
        ["tests/unit/test_observability.py::test_request_id_shape"],
        "a client's X-Request-ID is used only when it has a plain shape",
    ),
    m(
        "Pseudonyms.flow_id",
        "service/logs.py",
        '        return "f-" + self._hash(b"flow", elicitation_id)\n',
        "        return elicitation_id\n",
        ["tests/e2e/test_operability.py::test_json_logs_join_a_failure_to_the_flows_creation"],
        "log lines carry a keyed hash of the flow, never the elicitation id (a capability)",
    ),
    m(
        "ObservedMCPServer.unknown_tool",
        "service/mcp_server.py",
        "        if not has_tool(self, name):\n",
        "        if False:\n",
        ["tests/e2e/test_operability.py::test_an_unknown_tool_name_does_not_become_a_label"],
        "an unknown tool is -32602 and never a metric label",
    ),
    m(
        "CompletionHub.take_failure_once",
        "service/completion.py",
        "        return self._failures.pop(_failure_key(user, mcp_session_id, provider), None)\n",
        "        return self._failures.get(_failure_key(user, mcp_session_id, provider))\n",
        ["tests/unit/test_completion.py::test_a_failed_flow_is_notified_and_its_reason_is_reported_once"],
        "a failed flow's reason is reported once; the next call asks again",
    ),
    m(
        "CompletionHub.failure_per_user",
        "service/completion.py",
        "    return (user, mcp_session_id, provider)\n",
        '    return (UserRef("", ""), mcp_session_id, provider)\n',
        ["tests/unit/test_completion.py::test_a_failure_is_reported_only_to_the_user_whose_flow_it_was"],
        "a failure notice is keyed by its user too, not by a session id alone",
    ),
    m(
        "session_id_checked_by_sdk",
        "service/security_checks.py",
        "    if stateless:\n        return None\n    return header\n",
        "    return header\n",
        [f"{UNIT_CHECKS}::test_session_id_checked_by_sdk"],
        "a 2026-07-28 request's Mcp-Session-Id names no session",
    ),
    m(
        "ConnectionsPage.set_default_own_account",
        "connect_routes/connections_page.py",
        "            if await store.get_connection(browser.user, provider, account) is None:\n",
        "            if False:\n",
        [
            "tests/unit/test_connect_routes.py"
            "::test_the_default_account_is_shown_set_and_cleared_for_the_users_own_accounts"
        ],
        "the default account on /connections is one the signed-in user holds",
    ),
    m(
        "configure_logging.only_redacting_handlers",
        "service/logs.py",
        "            root.removeHandler(existing)\n",
        "            pass\n",
        ["tests/unit/test_redaction.py::test_configure_logging_replaces_a_handler_that_does_not_redact"],
        "no handler installed by a library prints unredacted lines beside ours",
    ),
    m(
        "nginx.error_log_without_queries",
        "deploy/nginx/nginx.conf",
        "    error_log stderr crit;\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_error_log_quotes_no_codes_states_or_links"],
        "nginx's error log never quotes codes, states or connect links",
    ),
    m(
        "nginx.replica_gone_404",
        "deploy/nginx/nginx.conf",
        "            error_page 502 504 = @replica_gone;\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_answers_404_for_a_session_whose_replica_is_gone"],
        "a session whose replica is gone gets 404, so the client starts a new one",
    ),
    Mutation(
        "nginx.single_valued_fields",
        "deploy/nginx/nginx.conf",
        (
            (
                "            if ($mcpuc_repeated_field) {\n",
                "            if ($mcpuc_repeated_field = never) {\n",
            ),
            ("        proxy_set_header MCP-Protocol-Version $http_mcp_protocol_version;\n", ""),
            ("        proxy_set_header Mcp-Session-Id $http_mcp_session_id;\n", ""),
        ),
        ("tests/unit/test_deploy_kit.py::test_nginx_never_passes_a_repeated_single_valued_field",),
        "nginx refuses (1.23+) or passes one line of (1.22) a repeated MCP header field",
    ),
    m(
        "create_app.metrics_off_the_public_port",
        "service/app.py",
        "if settings.metrics_port == 0 else []),",
        "if True else []),",
        ["tests/security/test_leakage.py::test_the_public_port_does_not_serve_metrics_by_default"],
        "GET /metrics only on the metrics port when one is set",
    ),
    m(
        "settings.metrics_port_default",
        "service/settings.py",
        "    metrics_port: int = DEFAULT_METRICS_PORT\n",
        "    metrics_port: int = 0\n",
        ["tests/security/test_leakage.py::test_the_public_port_does_not_serve_metrics_by_default"],
        "metrics on their own port by default, not on the public one",
    ),
    m(
        "nginx.metrics_private",
        "deploy/nginx/nginx.conf",
        "        location = /metrics {\n            return 404;\n        }\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_passes_one_request_id_and_keeps_metrics_private"],
        "the public proxy does not expose /metrics",
    ),
    # ---- the router and the Kubernetes kit (docs/deploy.md, sections 5, 13, 14) ----------------
    m(
        "nginx.request_id_shape",
        "deploy/nginx/nginx.conf",
        '        "~^[A-Za-z0-9._:-]{1,128}$"  $http_x_request_id;\n',
        '        "~^.+$"  $http_x_request_id;\n',
        ["tests/unit/test_deploy_kit.py::test_nginx_accepts_a_request_id_only_in_the_replicas_shape"],
        "a caller's X-Request-ID reaches nginx's log and the replica only in the replicas' shape",
    ),
    m(
        "nginx.callbacks_never_retried",
        "deploy/nginx/nginx.conf",
        "            proxy_next_upstream off;\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_never_retries_an_oauth_callback_on_another_replica"],
        "an OAuth callback (single-use state) is never sent to a second replica",
    ),
    m(
        "nginx.requests_per_client",
        "deploy/nginx/nginx.conf",
        "    limit_req zone=mcpuc_requests_per_client burst=200 nodelay;\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_limits_each_client_and_serves_the_others"],
        "a client past 100 requests a second (bursts of 200) gets 429",
    ),
    m(
        "nginx.connections_per_client",
        "deploy/nginx/nginx.conf",
        "    limit_conn mcpuc_connections_per_client 100;\n",
        "",
        ["tests/unit/test_deploy_kit.py::test_nginx_limits_each_client_and_serves_the_others"],
        "a client past 100 connections at once gets 429",
    ),
    m(
        "nginx.head_limits_under_the_replicas",
        "deploy/nginx/nginx.conf",
        "    large_client_header_buffers 2 6k;\n",
        "    large_client_header_buffers 4 8k;\n",
        ["tests/unit/test_deploy_kit.py::test_nginx_refuses_request_heads_the_replicas_would"],
        "nginx refuses request heads over its limit, under the replicas' own",
    ),
    m(
        "require_bounded_request.head",
        "service/request_limits.py",
        "        if request_head_bytes(scope) > MAX_REQUEST_HEAD_BYTES:\n",
        "        if False:\n",
        ["tests/unit/test_request_limits.py"],
        "a replica refuses a head over 16 KiB however it arrived (431)",
    ),
    m(
        "require_bounded_request.body",
        "service/request_limits.py",
        "    bounded_body = RequestBodyLimitMiddleware(app, MAX_REQUEST_BODY_BYTES)\n",
        "    bounded_body = app\n",
        ["tests/unit/test_request_limits.py"],
        "a replica refuses a body over 1 MiB on every route (413)",
    ),
    m(
        "create_app.require_bounded_request",
        "service/app.py",
        "            Middleware(require_bounded_request),",
        "",
        ["tests/unit/test_request_limits.py::test_the_app_bounds_heads_and_bodies_on_every_route"],
        "the app installs the head and body limits",
    ),
    m(
        "secrets_from_files.one_form",
        "service/settings.py",
        "        if name in environ:\n            raise SettingsError",
        "        if False:\n            raise SettingsError",
        [
            "tests/unit/test_settings.py::test_a_secret_set_twice_or_an_unreadable_file_names_the_variable_not_the_value"
        ],
        "a secret set both in the environment and as a file is refused",
    ),
    m(
        "k8s.secrets_as_files",
        "deploy/k8s/statefulset.yaml",
        "                name: mcp-env\n          env:\n",
        "                name: mcp-env\n"
        "            - secretRef:\n"
        "                name: mcp-secrets\n"
        "          env:\n",
        ["tests/unit/test_deploy_kit.py::test_k8s_configmap_and_secret_make_a_valid_configuration"],
        "no secret in the mcp pods' environment: the Secret is mounted as files",
    ),
    m(
        "k8s.network_policy_mcp_pods",
        "deploy/k8s/router.yaml",
        "              app.kubernetes.io/component: router\n      ports:\n        - port: 8000\n",
        "              app.kubernetes.io/component: router\n",
        ["tests/unit/test_deploy_kit.py::test_k8s_network_policy_admits_only_the_router_and_the_scraper"],
        "the mcp pods' http port from the router only, metrics from the monitoring namespace only",
    ),
    m(
        "redis.maxmemory_noeviction",
        "deploy/k8s/redis.yaml",
        " --maxmemory 160mb --maxmemory-policy noeviction",
        "",
        ["tests/unit/test_deploy_kit.py::test_every_redis_the_kit_runs_answers_oom_before_its_memory_limit"],
        "the kit's Redis answers -OOM under its memory limit instead of being killed",
    ),
    m(
        "images.pinned_by_digest",
        "deploy/k8s/redis.yaml",
        "          image: redis:7@sha256:17e1d479466f88e2d8fe48f21f44aba1572bf3bbc207be16b09870072b83b005\n",
        "          image: redis:7\n",
        ["tests/unit/test_deploy_kit.py::test_every_image_and_the_buildkit_frontend_is_pinned_by_digest"],
        "every image the kit runs is named by digest",
    ),
    # ---- a malicious provider: outbound_http.py, provider_oauth.py, lifecycle.py, logs.py -------
    m(
        "outbound_http.enforce_response_byte_limit",
        "service/outbound_http.py",
        "    if received > limit:\n",
        "    if False:\n",
        [
            "tests/unit/test_outbound_http.py::test_an_answer_over_the_byte_limit_is_refused_without_being_read_whole",
            "tests/unit/test_outbound_http.py::test_a_token_answer_over_its_byte_limit_is_refused_at_authlib",
        ],
        "a provider's answer read streamed up to a byte limit",
    ),
    m(
        "outbound_http.enforce_call_deadline",
        "service/outbound_http.py",
        "    with anyio.move_on_at(deadline):\n        return await step\n",
        "    return await step\n",
        [
            "tests/unit/test_outbound_http.py::test_a_dripping_answer_ends_at_the_whole_call_deadline",
            "tests/unit/test_outbound_http.py::test_a_dripping_token_answer_ends_at_the_whole_call_deadline",
        ],
        "one deadline for a whole provider call, not per read",
    ),
    m(
        "provider_oauth.require_bounded_token_fields",
        "service/provider_oauth.py",
        "        if len(text) > MAX_TOKEN_RESPONSE_FIELD:\n",
        "        if False:\n",
        ["tests/unit/test_provider_oauth.py::test_a_token_response_field_over_the_limit_is_refused"],
        "each kept token response field at most 8192 characters (a 2 MB scope)",
    ),
    m(
        "provider_oauth.require_vschar_tokens",
        "service/provider_oauth.py",
        "        if value is not None and not VSCHAR.fullmatch(value):\n",
        "        if False:\n",
        ["tests/unit/test_provider_oauth.py::test_a_token_with_characters_outside_vschar_is_refused"],
        "access and refresh tokens of VSCHAR only (RFC 6749 Appendix A)",
    ),
    m(
        "provider_oauth.require_understood_token_type",
        "service/provider_oauth.py",
        "    if token_type.lower() not in {t.lower() for t in accepted}:\n",
        "    if False:\n",
        ["tests/unit/test_provider_oauth.py::test_a_token_type_the_provider_does_not_list_is_refused"],
        "token_type one of the provider's token_types (RFC 6749 §7.1)",
    ),
    m(
        "require_account_id_of_provider",
        "service/security_checks.py",
        "    if len(named) > MAX_ACCOUNT_ID:\n",
        "    if False:\n",
        [f"{UNIT_CHECKS}::test_require_account_id_of_provider"],
        "the account id a provider names is at most 256 characters",
    ),
    m(
        "lifecycle.refresh_lock_ttl",
        "service/lifecycle.py",
        "    return timeout_seconds + LOCK_MARGIN\n",
        "    return timeout_seconds\n",
        [
            "tests/unit/test_lifecycle_single_flight.py"
            "::test_the_lock_outlives_the_holders_deadline_so_the_refresh_token_is_sent_once"
        ],
        "the refresh lock outlives the holder's deadline",
    ),
    m(
        "lifecycle.refresh_within_deadline",
        "service/lifecycle.py",
        "        with anyio.move_on_after(self._timeout):\n            return await refresh(",
        "        if True:\n            return await refresh(",
        [
            "tests/unit/test_lifecycle_single_flight.py"
            "::test_a_refresh_the_provider_never_answers_is_abandoned_at_its_deadline"
        ],
        "the refresher abandons its provider call at the deadline",
    ),
    m(
        "logs.escape_log_line",
        "service/logs.py",
        "    return text.translate(_CONTROLS)\n",
        "    return text\n",
        [
            "tests/unit/test_observability.py::test_text_lines_escape_control_characters_so_a_value_cannot_forge_a_record"
        ],
        "control characters escaped in text log lines (CWE-117)",
    ),
    # ---- login swap: Origin, account switch, prompt=login, names shown, the dev AS login form -----
    m(
        "require_same_origin",
        "service/security_checks.py",
        "    if origin_header not in (None, WITHHELD_ORIGIN) and origin_header != origin(public_url):\n",
        "    if False:\n",
        [
            f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route",
            f"{UNIT_CHECKS}::test_require_same_origin",
        ],
        "a POST naming a foreign Origin is refused",
    ),
    m(
        "require_same_origin.connect_posts",
        "connect_routes/connect.py",
        '        require_same_origin(request.headers.get("origin"), self._settings.public_url)\n',
        "",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /connect, /connect/api-key and /connect/cancel (ConnectRoutes._posted)",
    ),
    m(
        "require_same_origin.connections",
        "connect_routes/connections_page.py",
        '        require_same_origin(request.headers.get("origin"), self._runtime.settings.public_url)\n',
        "",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /connections/disconnect and /connections/default",
    ),
    m(
        "require_same_origin.logout",
        "connect_routes/login.py",
        '        require_same_origin(request.headers.get("origin"), self._settings.public_url)\n',
        "",
        [f"{SEC_BROWSER}::test_cross_site_origin_is_refused_on_every_post_route"],
        "Origin on POST /logout",
    ),
    m(
        "require_no_silent_account_switch",
        "service/security_checks.py",
        "    if signed_in is not None and signing_in != signed_in:\n",
        "    if False:\n",
        [
            f"{SEC_BROWSER}::test_login_while_signed_in_never_switches_the_account",
            f"{UNIT_CHECKS}::test_require_no_silent_account_switch",
        ],
        "a sign-in never replaces another signed-in user (GET /login and /login/callback)",
    ),
    m(
        "require_no_silent_account_switch.login",
        "connect_routes/login.py",
        "            require_no_silent_account_switch(signed_in.user if signed_in else None, None)\n",
        "            pass\n",
        [f"{SEC_BROWSER}::test_login_while_signed_in_never_switches_the_account"],
        "GET /login while signed in starts no sign-in",
    ),
    m(
        "require_no_silent_account_switch.callback",
        "connect_routes/login.py",
        "            require_no_silent_account_switch(signed_in.user if signed_in else None, user)\n",
        "            pass\n",
        [
            "tests/unit/test_login_and_resume_checks.py::test_login_callback_never_replaces_another_signed_in_user"
        ],
        "/login/callback keeps the signed-in user when another signs in",
    ),
    m(
        "login.prompt_login_for_connect_links",
        "connect_routes/login.py",
        " or next_path.startswith(CONNECT_LINK):\n",
        ":\n",
        [f"{SEC_BROWSER}::test_sign_in_for_a_connect_link_asks_the_authorization_server_again"],
        "a sign-in for a connect link sends prompt=login",
    ),
    m(
        "require_visible_client_name",
        "service/security_checks.py",
        "    if not name.strip() or any(is_blank(c) for c in name):\n",
        "    if False:\n",
        [
            "tests/security/test_phishing.py::test_client_name_with_blank_letters_is_not_shown",
            f"{UNIT_CHECKS}::test_require_visible_client_name",
        ],
        "no blank or invisible letters in a client name shown (our pages, dev AS registration)",
    ),
    m(
        "lookalike_note",
        "service/names.py",
        "    scripts = sorted({_script(c) for c in name if c.isalpha()})\n",
        "    return None\n",
        [
            "tests/security/test_phishing.py::test_lookalike_account_and_client_names_are_shown_with_their_code_points"
        ],
        "look-alike account and client names are flagged with their code points",
    ),
    m(
        "require_csrf_token.dev_as_login",
        "mock_providers/dev_as_routes.py",
        '            require_csrf_token(request.session.get(LOGIN_CSRF), form.get("csrf"))\n',
        "            pass\n",
        [
            f"{SEC_BROWSER}::test_dev_as_login_without_its_form_token_is_refused",
            "tests/unit/test_mock_providers.py::test_login_form_needs_its_own_token",
        ],
        "the dev AS login form needs its CSRF token (login CSRF at the AS)",
    ),
    m(
        "require_finished_in_store",
        "service/completion_bus.py",
        "    if stored is None or stored.status.is_live:\n",
        "    if stored is None:\n",
        [
            "tests/security/test_completion_bus.py",
            "tests/unit/test_completion_bus.py::test_require_finished_in_store",
        ],
        "a NOTIFY on the PostgreSQL bus completes only a flow the store says has ended",
    ),
    m(
        "postgres.pending_limit_per_user",
        "token_store/postgres.py",
        '                await conn.execute("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", '
        "_user_key(e.user))\n",
        "",
        ["tests/unit/test_store_contract.py::test_concurrent_creates_respect_the_limit[postgres]"],
        "PostgreSQL counts and inserts a user's live elicitations one writer at a time",
        attempts=3,
    ),
    # The PostgreSQL store's statements: a parameter the mutant no longer needs stays referenced,
    # or asyncpg would refuse the call before the mutant runs.
    m(
        "postgres.take_oauth_state",
        "token_store/postgres.py",
        '"DELETE FROM oauth_states WHERE key = $1 RETURNING blob, expires_at"',
        '"SELECT blob, expires_at FROM oauth_states WHERE key = $1"',
        [f"{CONTRACT}::test_oauth_state_single_use[postgres]"],
        "OAuth state taken once (DELETE ... RETURNING)",
    ),
    m(
        "postgres.take_nonce",
        "token_store/postgres.py",
        '"DELETE FROM nonces WHERE key = $1 RETURNING expires_at"',
        '"SELECT expires_at FROM nonces WHERE key = $1"',
        [f"{CONTRACT}::test_nonce_single_use_and_expiry[postgres]"],
        "requestState nonce taken once",
    ),
    m(
        "postgres.pending_limit",
        "token_store/postgres.py",
        '"AND status = ANY($8::text[]) AND expires_at > $9) < $10 RETURNING 1",',
        '"AND status = ANY($8::text[]) AND expires_at > $9) >= 0 AND $10::bigint IS NOT NULL RETURNING 1",',
        [f"{CONTRACT}::test_too_many_pending_at_the_limit[postgres]"],
        "TooManyPending at max_pending_per_user",
    ),
    m(
        "postgres.transition_cas",
        "token_store/postgres.py",
        'f"WHERE id = {eid} AND status = {expected} AND expires_at > {now} RETURNING record::text"',
        'f"WHERE id = {eid} AND {expected}::text IS NOT NULL AND expires_at > {now} RETURNING record::text"',
        [f"{CONTRACT}::test_concurrent_transitions_exactly_one_wins[postgres]"],
        "transition is a compare-and-set on the status",
    ),
    m(
        "postgres.release_lock_owner",
        "token_store/postgres.py",
        'f"DELETE FROM locks WHERE name_hash = $1 AND owner = $2 RETURNING expires_at > {_DB_NOW}",',
        'f"DELETE FROM locks WHERE name_hash = $1 AND $2::text IS NOT NULL '
        'RETURNING expires_at > {_DB_NOW}",',
        [f"{CONTRACT}::test_expired_lock_is_taken_over_and_the_stale_owner_cannot_release_it[postgres]"],
        "a lock is released only by its owner",
    ),
    m(
        "postgres.open_elicitation_single_use",
        "token_store/postgres.py",
        '"(key, blob, expires_at) SELECT $5, $6, $7 FROM opened) SELECT record FROM opened",',
        '"(key, blob, expires_at) SELECT $5, $6, $7) SELECT record FROM opened",',
        [f"{CONTRACT}::test_open_elicitation_stores_the_state_and_opens_once[postgres]"],
        "open_elicitation stores a state only when it opened the elicitation",
    ),
    m(
        "reusable_link_of_same_user_and_client",
        "service/security_checks.py",
        "            and elicitation.client_id == client_id\n",
        "",
        [
            f"{UNIT_CHECKS}::test_reusable_link_of_same_user_and_client",
            "tests/security/test_link_fallback.py::test_link_shown_again_only_to_its_user_and_client",
        ],
        "a link shown again only to the client that asked for it (the link in a tool error)",
    ),
    m(
        "reusable_link_of_same_user_and_client.pending",
        "service/security_checks.py",
        "            and elicitation.status is ElicitationStatus.PENDING\n",
        "",
        [
            f"{UNIT_CHECKS}::test_reusable_link_of_same_user_and_client",
            "tests/security/test_link_fallback.py::test_an_opened_link_is_not_shown_again",
        ],
        "only an unopened link is shown again (an opened one is spent)",
    ),
    m(
        "require_replica_acknowledgement",
        "token_store/redis_store.py",
        "    if acknowledged < wanted:\n",
        "    if False:\n",
        [
            "tests/unit/test_store_sentinel.py::"
            "test_a_write_no_replica_acknowledges_fails_and_other_users_still_work"
        ],
        "with MCPUC_STORE_WAIT_REPLICAS, a token set no replica acknowledged is reported unstored",
    ),
    m(
        "require_slot_tag",
        "token_store/redis_store.py",
        "    if opaque[:SLOT_TAG_CHARS] != slot:\n",
        "    if False:\n",
        [
            "tests/unit/test_store_cluster.py::"
            "test_an_id_without_its_users_slot_tag_is_refused_and_other_users_still_work"
        ],
        "on Redis Cluster an id or state lies in its user's hash slot, or is refused",
    ),
    # ---- service/admin.py: operators' controls ------------------------------------------------
    m(
        "admin_request_on_admin_port",
        "service/admin.py",
        "        if not admin_request_on_admin_port(request, settings.admin_port):\n",
        "        if False:\n",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_request_on_the_public_port"],
        "the admin API answers only on its own port",
    ),
    m(
        "admin_bearer_has_admin_scope",
        "service/admin.py",
        "        if not admin_bearer_has_admin_scope(token, settings.admin_scope):\n",
        "        if False:\n",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_user_token_without_the_admin_scope"],
        "a user's bearer without the admin scope acts as an operator",
    ),
    m(
        "static_admin_token_matches",
        "service/admin.py",
        "    return hmac.compare_digest(digest, configured_sha256)\n",
        "    return True\n",
        ["tests/security/test_admin_api.py::test_admin_api_refuses_a_user_token_without_the_admin_scope"],
        "any bearer passes as the static admin token",
    ),
    m(
        "cmd_keys_retire",
        "service/cli.py",
        "    if sealed:\n",
        "    if False:\n",
        ["tests/unit/test_cli.py::test_keys_retire_refuses_while_a_record_is_sealed_under_the_key"],
        "a key is retired while records are still sealed under it",
    ),
    m(
        "WebhookSender.signed_headers",
        "service/webhooks.py",
        '"webhook-signature": self._signer.sign(message.id, timestamp, message.body),',
        '"webhook-signature": self._signer.sign(message.id, timestamp, "{}"),',
        ["tests/unit/test_webhooks.py::test_a_webhook_is_signed_verifiable_and_names_no_secret"],
        "the webhook signature covers the body",
    ),
    m(
        "Operator.revoke_user",
        "service/operator.py",
        "found = await self._store().find_connections(provider, user.sub, user.iss)",
        "found = await self._store().find_connections(provider, user.sub, None)",
        ["tests/unit/test_operator.py::test_revoke_user_is_iss_and_sub_never_the_same_sub_elsewhere"],
        "a user is (iss, sub): the same sub at another issuer is not removed",
    ),
    m(
        "admin._json_body.unknown_members",
        "service/admin.py",
        "    if unknown:\n",
        "    if False:\n",
        ["tests/security/test_admin_api.py::test_admin_api_lets_the_static_token_act_and_audits_it"],
        "a misspelt member of an admin request is refused, never ignored",
    ),
)
# --------------------------------------------------------------------------------------------------
# Machinery
# --------------------------------------------------------------------------------------------------


class TableError(Exception):
    """The table does not match the code (an `old` snippet missing, ambiguous or not compiling)."""


class RestoreError(Exception):
    """A mutated file could not be put back exactly as it was."""


class Interrupted(Exception):
    """SIGTERM or SIGHUP: unwind through every `finally` so the file is restored."""


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def mutated_source(root: Path, mutation: Mutation) -> tuple[bytes, bytes]:
    """(original, mutated) bytes of the mutation's file; TableError when a patch does not apply."""
    path = root / mutation.file
    try:
        original = path.read_bytes()
    except OSError as exc:
        raise TableError(f"{mutation.name}: cannot read {mutation.file} ({exc.strerror})") from None
    text = original.decode("utf-8")
    for number, (old, new) in enumerate(mutation.patches, start=1):
        found = text.count(old)
        if found != 1:
            where = "not found" if found == 0 else f"found {found} times"
            raise TableError(
                f"{mutation.name}: patch {number} `old` text {where} in {mutation.file}:\n"
                + "\n".join("    | " + line for line in old.splitlines())
            )
        if old == new:
            raise TableError(f"{mutation.name}: patch {number} changes nothing")
        text = text.replace(old, new, 1)
    if path.suffix == ".py":  # the proxy's configuration is checked by its own tests (nginx -t)
        try:
            compile(text, str(path), "exec")
        except SyntaxError as exc:
            raise TableError(
                f"{mutation.name}: the mutated {mutation.file} does not compile ({exc})"
            ) from None
    return original, text.encode("utf-8")


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
def mutated(root: Path, mutation: Mutation) -> Iterator[None]:
    """Apply the mutation; always restore the original bytes and check them by SHA-256."""
    path = root / mutation.file
    original, mutant = mutated_source(root, mutation)
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
                f"{mutation.file} changed during the run (not by this script); it was NOT restored. "
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
            raise RestoreError(
                f"{mutation.file}: restored content hash {restored} != original {original_hash}"
            )


@dataclasses.dataclass
class Outcome:
    mutation: Mutation
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


def print_table(outcomes: Sequence[Outcome]) -> None:
    rows = [("check", "file", "result", "s")]
    for o in outcomes:
        if o.status == "CAUGHT":
            result = ", ".join(o.failed) if o.failed else "caught (no test id reported)"
        else:
            result = o.status + (f": {o.detail}" if o.detail else "")
        rows.append((o.mutation.name, o.mutation.file, result, f"{o.seconds:.1f}"))
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    for number, row in enumerate(rows):
        print(f"{row[0]:<{widths[0]}}  {row[1]:<{widths[1]}}  {row[3]:>5}  {row[2]}")
        if number == 0:
            print(f"{'-' * widths[0]}  {'-' * widths[1]}  {'-' * 5}  {'-' * min(widths[2], 60)}")


def select(names: Sequence[str] | None) -> list[Mutation]:
    if not names:
        return list(MUTATIONS)
    wanted = [n.strip() for name in names for n in name.split(",") if n.strip()]
    known = {mutation.name: mutation for mutation in MUTATIONS}
    unknown = [n for n in wanted if n not in known]
    if unknown:
        print(f"unknown check(s): {', '.join(unknown)} (see --list)", file=sys.stderr)
        raise SystemExit(2)
    return [known[n] for n in dict.fromkeys(wanted)]


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

    mutations = select(args.only)
    if args.list:
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `--list | head` ends quietly
        for mutation in mutations:
            print(f"{mutation.name:<36} {mutation.file:<34} {mutation.removes}")
            for test in mutation.tests:
                print(f"{'':<36}   {test}")
        return 0

    # Every patch must apply to the code as it is now, before anything is touched.
    problems = []
    for mutation in mutations:
        try:
            mutated_source(ROOT, mutation)
        except TableError as exc:
            problems.append(str(exc))
    if problems:
        print("The mutation table no longer matches the code (nothing was mutated):", file=sys.stderr)
        print("\n".join(problems), file=sys.stderr)
        return 2

    files = sorted({mutation.file for mutation in mutations})
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
            union = list(dict.fromkeys(t for mutation in mutations for t in mutation.tests))
            print(f"baseline: {len(union)} selections, unmutated ...", flush=True)
            t0 = time.monotonic()
            code, failed, tail = run_pytest(args.python, root, union, args.timeout * 2, args.copy)
            print(f"baseline: exit {code} in {time.monotonic() - t0:.1f}s", flush=True)
            if code != 0:
                print("The selected tests do not pass without mutations; fix that first:", file=sys.stderr)
                print("\n".join(failed) or tail, file=sys.stderr)
                return 2

        try:
            for number, mutation in enumerate(mutations, start=1):
                print(f"[{number}/{len(mutations)}] {mutation.name} ...", end=" ", flush=True)
                t0 = time.monotonic()
                runs = 0
                with mutated(root, mutation):
                    while True:
                        runs += 1
                        code, failed, tail = run_pytest(
                            args.python, root, mutation.tests, args.timeout, args.copy
                        )
                        if code != 0 or runs >= mutation.attempts:
                            break
                seconds = time.monotonic() - t0
                if code == 1 and failed:
                    if mutation.attempts > 1:
                        failed = [f"{failed[0]} (run {runs} of up to {mutation.attempts})", *failed[1:]]
                    outcome = Outcome(mutation, "CAUGHT", failed, seconds)
                elif code == 0:
                    detail = f"in {runs} runs" if runs > 1 else ""
                    outcome = Outcome(mutation, "NOT CAUGHT", [], seconds, detail)
                elif code is None:
                    outcome = Outcome(mutation, "TIMEOUT", failed, seconds, f"after {args.timeout:.0f}s")
                else:
                    outcome = Outcome(mutation, "ERROR", failed, seconds, f"pytest exit {code}")
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
        print("not caught: " + ", ".join(o.mutation.name for o in missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
