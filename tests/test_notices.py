"""Notices to downstream owners: each webhook delivery ends by a total deadline and each relay by a
budget, a notice is retried with backoff until delivered (never dropped), and `backfill notices`
and `backfill status` show where each one is. Receivers are real HTTP servers on 127.0.0.1."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml

from backfill_assets.control import outbox
from backfill_assets.control.schema import ensure_schema

TRICKLE_EVERY = 0.5  # seconds between bytes: never long enough for a per-read timeout to fire
TRICKLE_BYTES = 80  # then the receiver hangs up: it stops by itself (40 s at most)


class Trickler:
    """A receiver that reads the request, then answers one byte every TRICKLE_EVERY seconds."""

    def __init__(self) -> None:
        self.server = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.server.getsockname()[1]}/notify"
        self.stop = threading.Event()
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        self.server.settimeout(0.2)
        while not self.stop.is_set():
            try:
                con, _ = self.server.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            threading.Thread(target=self._trickle, args=(con,), daemon=True).start()

    def _trickle(self, con: socket.socket) -> None:
        with con:
            con.settimeout(5)
            try:
                con.recv(65536)
                answer = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"a" * TRICKLE_BYTES
                for byte in answer[:TRICKLE_BYTES]:
                    if self.stop.wait(TRICKLE_EVERY):
                        return
                    con.sendall(bytes([byte]))
            except OSError:
                return

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)
        self.server.close()


@pytest.fixture
def trickler():
    slow = Trickler()
    yield slow
    slow.close()


class Receiver(BaseHTTPRequestHandler):
    """Answers 500 to the first `failures` posts, then 200; counts them."""

    failures = 0
    posts: list[dict] = []

    def do_POST(self):  # noqa: N802 (http.server's naming)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Receiver.posts.append(body)
        self.send_response(500 if len(Receiver.posts) <= Receiver.failures else 200)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    Receiver.posts, Receiver.failures = [], 0
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/notify", Receiver
    server.shutdown()
    server.server_close()


def with_webhook(world, url: str | None, name: str = "fix", day: str = "2026-01-02"):
    path = world.plan(name, start=day, end=day, proof=(day,))
    doc = yaml.safe_load(path.read_text())
    if url:
        doc["publish"]["webhook_url"] = url
    path.write_text(yaml.safe_dump(doc))
    return path


def queue(world, url: str, count: int) -> None:
    with world.warehouse().session() as session:
        ensure_schema(session)
        with session.transaction():
            for i in range(count):
                outbox.enqueue(session, plan_id="fix", event="frozen", recipients=["#owners"],
                               message=f"notice {i}", body={}, webhook_url=url, actor="test")


def test_a_trickling_receiver_cannot_hang_plan_approve(world, cli, trickler):
    path = with_webhook(world, trickler.url)
    world.approve(path, "alice")  # one of two: nothing queued yet
    started = time.monotonic()
    done = cli("plan", "approve", str(path), "--by", "bob", "--key", str(world.keys["bob"]),
               env={outbox.DEADLINE_ENV: "2"}, timeout=120)
    took = time.monotonic() - started
    assert done.code == 0, done.err
    assert took < TRICKLE_BYTES * TRICKLE_EVERY / 2, took  # ended by the deadline, not by the receiver
    assert trickler.accepted == 1
    [(attempts, error, delivered)] = world.sql("SELECT attempts, last_error, delivered_at FROM backfill_control.outbox")
    assert attempts == 1 and delivered is None and "2s deadline" in error, error


def test_a_resolver_that_never_answers_cannot_hang_plan_approve(world, cli, tmp_path):
    """The webhook's name is looked up within the delivery's deadline: here the only nameserver (in
    the command's own mount namespace) takes every query and answers none, and the system's resolver
    would wait 30 s for it."""
    import random

    from tests.conftest import BIN

    server = f"127.{random.randint(1, 250)}.{random.randint(1, 250)}.{random.randint(2, 250)}"
    silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    silent.bind((server, 53))  # receives the queries, never reads or answers them
    resolv = tmp_path / "resolv.conf"
    resolv.write_text(f"nameserver {server}\noptions timeout:30 attempts:1\n")
    path = with_webhook(world, "http://hooks.example.test:8080/notify")
    world.approve(path, "alice")
    command = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', str(resolv),
               str(BIN / "backfill"), "--home", str(world.home), "plan", "approve", str(path), "--by", "bob",
               "--key", str(world.keys["bob"])]
    try:
        started = time.monotonic()
        done = cli(command=command, env={outbox.DEADLINE_ENV: "2"}, timeout=120)
        took = time.monotonic() - started
    finally:
        silent.close()
    assert done.code == 0, done.err
    assert took < 25, took  # ended by the deadline, not by the resolver's 30 s
    [(attempts, error, delivered)] = world.sql("SELECT attempts, last_error, delivered_at FROM backfill_control.outbox")
    assert attempts == 1 and delivered is None and "2s deadline" in error, error


def test_one_relay_keeps_within_its_budget_and_leaves_the_rest_queued(world, trickler, monkeypatch):
    queue(world, trickler.url, 4)
    monkeypatch.setenv(outbox.DEADLINE_ENV, "1")
    started = time.monotonic()
    outcomes = outbox.relay(world.warehouse(), budget=2.5)
    assert time.monotonic() - started < 5
    assert 1 <= len(outcomes) <= 3 and not any(o.ok for o in outcomes)
    untried = world.sql("SELECT count(*) FROM backfill_control.outbox WHERE attempts = 0")[0][0]
    assert untried == 4 - len(outcomes)  # not dropped, not counted: the next relay's turn


def test_a_notice_is_retried_with_backoff_and_never_dropped(world, receiver):
    url, server = receiver
    server.failures = 25  # more failures than the old relay's 20 attempts
    queue(world, url, 1)
    for attempt in range(1, 26):
        [outcome] = outbox.relay(world.warehouse())
        assert not outcome.ok and outcome.detail == "HTTP 500"
        assert outbox.relay(world.warehouse()) == []  # backing off: not due again yet
        [(next_at,)] = world.sql("SELECT next_attempt_at FROM backfill_control.outbox_retries")
        assert next_at - time.time() > outbox.backoff_seconds(attempt) - 5
        # the time until the next attempt passes (set on the record, rather than slept)
        world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    [delivered] = outbox.relay(world.warehouse())
    assert delivered.ok and len(server.posts) == 26
    assert world.sql("SELECT attempts, delivered_at IS NOT NULL FROM backfill_control.outbox") == [(26, True)]
    assert outbox.backoff_seconds(1) == outbox.BACKOFF_FIRST_SECONDS
    assert outbox.backoff_seconds(40) == outbox.BACKOFF_MAX_SECONDS


def test_notices_lists_each_delivery_and_status_counts_the_undelivered(world, run_cli, receiver):
    url, server = receiver
    server.failures = 1
    world.approve(with_webhook(world, url, "hooked"))  # its freeze notice: HTTP 500 after the commit
    world.approve(with_webhook(world, None, "quiet", "2026-01-03"))  # no webhook: read here
    listed = run_cli("notices")
    assert listed.code == 0, listed.err
    assert "plan hooked  frozen  to #revenue-consumers, finance-bi" in listed.out
    assert "delivery: undelivered after 1 attempt(s): HTTP 500; next attempt 20" in listed.out
    assert "delivery: no webhook: read here" in listed.out
    assert "1 undelivered" in listed.out
    as_json = json.loads(run_cli("notices", "quiet", "--json").out)
    assert [n["delivery"] for n in as_json] == ["no webhook: read here"]
    status = run_cli("status", "hooked")
    assert "notices    1 sent; 1 undelivered (last error: HTTP 500): `backfill notices hooked`" in status.out
    assert json.loads(run_cli("status", "hooked", "--json").out)["undelivered_notices"] == 1
    # a notice without a webhook is read with `backfill notices`: `status` says so, as text and JSON
    assert "notices    1 sent; 1 without a webhook: `backfill notices quiet`" in run_cli("status", "quiet").out
    assert json.loads(run_cli("status", "quiet", "--json").out)["notices"] == \
        "1 sent; 1 without a webhook: `backfill notices quiet`"
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    assert [o.ok for o in outbox.relay(world.warehouse())] == [True]
    assert "delivery: delivered at 20" in run_cli("notices", "hooked").out
    assert json.loads(run_cli("status", "hooked", "--json").out)["undelivered_notices"] == 0


def _tick(world, sensor: str):
    import dagster as dg

    from backfill_assets.defs.resources import WarehouseResource

    defs = world.defs()
    context = dg.build_sensor_context(instance=world.instance, definitions=defs,
                                      resources={"warehouse": WarehouseResource(home=str(world.home))})
    return defs.resolve_sensor_def(sensor).evaluate_tick(context)


def test_the_relay_sensor_delivers_a_pending_notice_and_the_reopen_sensor_does_not(world, receiver):
    url, server = receiver
    server.failures = 1
    queue(world, url, 1)
    [(notice_id,)] = world.sql("SELECT notice_id FROM backfill_control.outbox")
    reopen = _tick(world, "daily_revenue__reopen_publish")
    assert not reopen.run_requests and server.posts == []  # it requests and reports, and delivers nothing
    failed = _tick(world, "backfill_notice_relay")
    assert failed.skip_message == f"notice {notice_id} failed (HTTP 500), retried with backoff"
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")  # the backoff passes
    _tick(world, "daily_revenue__reopen_publish")
    assert len(server.posts) == 1
    delivered = _tick(world, "backfill_notice_relay")
    assert delivered.skip_message == f"delivered notice(s) {notice_id}"
    assert [post["notice_id"] for post in server.posts] == [notice_id, notice_id]
    assert world.sql("SELECT attempts, delivered_at IS NOT NULL FROM backfill_control.outbox") == [(2, True)]
    assert _tick(world, "backfill_notice_relay").skip_message == "no notice due"  # delivered once, not again


def test_definitions_without_the_relay_are_told_so_by_the_reopen_sensor(world):
    """A 0.2 project registered `sensors=[table.sensor]`, whose ticks delivered notices; the reopen
    sensor no longer does, so it says on every tick that the relay is missing (not silence)."""
    import dagster as dg

    from backfill_assets.defs.relay import relay_name
    from backfill_assets.defs.resources import WarehouseResource

    full = world.defs()
    [reopen] = [s for s in full.sensors if s.name == "daily_revenue__reopen_publish"]
    old_style = dg.Definitions(assets=full.assets, sensors=[reopen], resources=full.resources)
    resources = {"warehouse": WarehouseResource(home=str(world.home))}
    first = old_style.resolve_sensor_def(reopen.name).evaluate_tick(
        dg.build_sensor_context(instance=world.instance, definitions=old_style, resources=resources))
    # the first tick records the plans' state on the asset (no skip message); the next one skips
    context = dg.build_sensor_context(instance=world.instance, definitions=old_style, cursor=first.cursor,
                                      resources=resources)
    tick = old_style.resolve_sensor_def(reopen.name).evaluate_tick(context)
    assert f"no notice relay: register `sensors=table.sensors` ({relay_name()})" in tick.skip_message
    assert "no notice relay" not in _tick(world, "daily_revenue__reopen_publish").skip_message


@pytest.mark.parametrize("url", ["http://hooks..example.com/notify", f"http://{'a' * 64}.example.com/notify"])
def test_a_webhook_url_no_resolver_takes_is_refused_before_signing_and_never_fails_a_relay(world, capfd, url):
    """A `webhook_url` typed with a doubled dot, or a label over 63 characters, passed `plan
    validate` and approval; the relay after the approval that completed the plan then died in the
    name lookup (idna raised UnicodeError, which the lookup's thread did not catch, then
    KeyError): the command exited 3 after its work committed, and so did every later command that
    relays, with no command to remove the notice (found by an attack). `plan validate` names it
    now; and a delivery to such a URL (one a record holds from before) is a failed attempt, said
    as one, never an error."""
    path = world.plan("fix", start="2026-01-02", end="2026-01-02", proof=("2026-01-02",))
    document = yaml.safe_load(path.read_text())
    document["publish"]["webhook_url"] = url
    path.write_text(yaml.safe_dump(document))
    capfd.readouterr()
    assert world.cli("plan", "validate", str(path)) == 1
    err = capfd.readouterr().err
    assert "webhook_url" in err and "not a name a resolver takes" in err, err
    queue(world, url, 1)
    [outcome] = outbox.relay(world.warehouse())
    assert not outcome.ok and "label empty or too long" in outcome.detail, outcome.detail
    assert world.sql("SELECT attempts FROM backfill_control.outbox") == [(1,)]  # retried later, never dropped


def test_a_notice_edited_in_the_outbox_is_never_delivered_and_verify_names_it(world, run_cli, receiver):
    """The insider pointed an undelivered freeze notice at a URL of their own with a body of their
    own: the relay posted it there, past the plan's webhook check, and `evidence verify` passed
    (found by an attack). The chain row of each notice holds the digest of what it says and where
    it goes: an outbox row that differs is not delivered, and verify names it."""
    url, server = receiver
    server.failures = 1
    queue(world, url, 1)
    [failed] = outbox.relay(world.warehouse())
    assert not failed.ok
    world.run_sql("UPDATE backfill_control.outbox SET webhook_url = ?, body = '{}', recipients = 'nobody'",
                  [url + "/elsewhere"])
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    [refused] = outbox.relay(world.warehouse())
    assert not refused.ok and "differs from what the evidence chain recorded" in refused.detail
    assert len(server.posts) == 1  # only the first, failed, attempt reached a receiver
    verify = run_cli("evidence", "verify")
    assert verify.code == 1 and "notice 1 of plan fix in backfill_control.outbox differs from" in verify.err, \
        verify.err


def test_a_notice_marked_delivered_without_its_delivery_in_the_chain_is_delivered_again(world, run_cli, receiver):
    """`UPDATE outbox SET delivered_at = ...` dropped a freeze notice nobody received, and `notices`
    said delivered (found by an attack). A delivery is a chain row: a notice marked delivered
    without one is due again (and so is one a relay of the previous release delivered, which wrote
    none: refusing the record for it broke a team that did nothing wrong, found by the next attack).
    At least once: receivers deduplicate on notice_id."""
    url, server = receiver
    server.failures = 1
    queue(world, url, 2)
    outbox.relay(world.warehouse())  # the first fails; the second is delivered: a chain row says so
    assert [p["message"] for p in server.posts] == ["notice 0", "notice 1"]
    world.run_sql("UPDATE backfill_control.outbox SET delivered_at = '2026-01-01T00:00:00Z' WHERE delivered_at IS NULL")
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    [again] = outbox.relay(world.warehouse())
    assert again.ok and [p["message"] for p in server.posts] == ["notice 0", "notice 1", "notice 0"]
    assert outbox.relay(world.warehouse()) == []  # its delivery is in the chain now
    assert run_cli("evidence", "verify").code == 0


def test_one_notice_whose_attempts_overflow_the_backoff_stops_no_other_delivery(world, receiver):
    """`15 * 2 ** 1024` overflowed a float: a receiver dead for ~42 days (or one edited count) made
    every relay an internal error, rolling back the record of every other delivery, each re-posted
    forever (found by an attack)."""
    url, server = receiver
    server.failures = 1
    queue(world, url, 2)
    world.run_sql("UPDATE backfill_control.outbox SET attempts = 2000 WHERE message = 'notice 0'")
    outcomes = outbox.relay(world.warehouse())
    assert [o.ok for o in outcomes] == [False, True]
    assert world.sql("SELECT message, delivered_at IS NOT NULL FROM backfill_control.outbox ORDER BY notice_id") == \
        [("notice 0", False), ("notice 1", True)]
    assert outbox.backoff_seconds(10_000) == outbox.BACKOFF_MAX_SECONDS


def test_a_next_attempt_time_out_of_range_is_one_line_and_holds_nothing_off(world, run_cli, receiver):
    """`next_attempt_at = 1e300` made `backfill notices` an internal error (OverflowError), and held
    the notice off for good (found by an attack)."""
    url, server = receiver
    server.failures = 1
    queue(world, url, 1)
    outbox.relay(world.warehouse())
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 1e300")
    listed = run_cli("notices")
    assert listed.code == 0 and "internal error" not in listed.err, listed.err
    assert "next attempt not a time" in listed.out
    # the relay after the command: a time past every backoff is due, never held off for good
    assert len(server.posts) == 2
    assert world.sql("SELECT delivered_at IS NOT NULL FROM backfill_control.outbox") == [(True,)]


def test_a_notice_planted_in_the_outbox_is_listed_as_not_one_backfill_queued(world, run_cli):
    """A row inserted into the outbox (no chain row) read as a real notice in `backfill notices`,
    the only channel of a team without a webhook (found by an attack); the relay never posts one."""
    queue(world, "http://127.0.0.1:9/never", 1)
    world.run_sql("INSERT INTO backfill_control.outbox VALUES (999999, 'fix', 'reopened', '#consumers', "
                  "'daily_revenue reopened: consume freely', '{}', NULL, 0, NULL, NULL, '2026-01-01T00:00:00Z')")
    listed = run_cli("notices", "fix")
    assert listed.code == 0
    planted = listed.out[listed.out.index("consume freely"):]
    assert "NOT a notice backfill queued: no evidence chain row records it" in planted.split("\n\n")[0], listed.out


def test_a_notice_queued_before_notices_were_digested_goes_only_to_its_plans_webhook(world, receiver):
    """A notice of an earlier release (its chain row holds no digest), still undelivered, was pointed
    at the insider's URL and posted there (found by an attack): it goes only where a version of its
    plan said."""
    from backfill_assets.control import evidence_log
    from backfill_assets.control.names import next_id
    from backfill_assets.warehouse.state_store import outbox as outbox_store

    url, server = receiver
    server.failures = 1  # the plan's own freeze notice fails once
    world.approve(with_webhook(world, url))
    with world.warehouse().session() as session, session.transaction():  # as the earlier release queued one
        nid = next_id(session)
        outbox_store.insert(session, nid, "fix", "frozen", "#owners", "an old notice", "{}", url,
                            evidence_log.now_iso())
        evidence_log.append(session, plan_id="fix", kind="notification", actor="old release", payload={
            "notice_id": nid, "event": "frozen", "recipients": ["#owners"], "webhook": True})
    world.run_sql("UPDATE backfill_control.outbox SET webhook_url = ? WHERE notice_id = ?", [url + "/theirs", nid])
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    outcomes = {o.notice_id: o for o in outbox.relay(world.warehouse())}
    assert not outcomes[nid].ok and "no version of plan fix names this webhook" in outcomes[nid].detail
    assert all(p.get("message") != "an old notice" for p in server.posts)
    world.run_sql("UPDATE backfill_control.outbox SET webhook_url = ? WHERE notice_id = ?", [url, nid])
    world.run_sql("UPDATE backfill_control.outbox_retries SET next_attempt_at = 0")
    assert {o.notice_id: o.ok for o in outbox.relay(world.warehouse())}.get(nid) is True


def _queue(world, url: str | None, message: str) -> None:
    with world.warehouse().session() as session:
        ensure_schema(session)
        with session.transaction():
            outbox.enqueue(session, plan_id="fix", event="frozen", recipients=["#owners"], message=message,
                           body={}, webhook_url=url, actor="test")


def _block(out: str, text: str) -> str:
    """The lines `backfill notices` prints for the notice whose message holds `text`."""
    start = out.rindex("\nnotice ", 0, out.index(text)) if "\nnotice " in out[:out.index(text)] else 0
    end = out.find("\nnotice ", out.index(text))
    return out[start:end if end >= 0 else len(out)]


def test_a_notice_edited_in_the_outbox_is_not_listed_as_the_notice_backfill_queued(world, run_cli):
    """A team without a webhook reads its notices in `backfill notices`, its only channel. The
    insider typed over a freeze notice's text and recipients: it was listed as the notice backfill
    queued (the relay refuses to post such a row, and `evidence verify` names it, but the listing
    compared the row with no digest of the chain)."""
    _queue(world, None, "daily_revenue 2026-01-02 is frozen: keep reading the last published data")
    world.run_sql("UPDATE backfill_control.outbox SET message = 'daily_revenue reopened: consume freely', "
                  "recipients = '#consumers'")
    listed = run_cli("notices", "fix")
    assert listed.code == 0, listed.err
    shown = _block(listed.out, "consume freely")
    assert "NOT the notice backfill queued" in shown, listed.out
    assert "no webhook: read here" not in shown, listed.out


def test_a_notice_marked_delivered_without_its_delivery_in_the_chain_is_not_listed_as_delivered(
        world, run_cli, receiver):
    """`UPDATE outbox SET delivered_at = ...` over a freeze notice its receiver never took: the
    relay posts it again, but `backfill notices` (and `status`'s count of undelivered notices),
    read before the relay, said it was delivered, at a time the insider typed."""
    url, server = receiver
    server.failures = 10**6  # the receiver is down
    _queue(world, url, "daily_revenue 2026-01-02 is frozen")
    [failed] = outbox.relay(world.warehouse())
    assert not failed.ok
    world.run_sql("UPDATE backfill_control.outbox SET delivered_at = '2026-01-01T00:00:00Z'")
    [shown] = json.loads(run_cli("notices", "fix", "--json").out)
    assert shown["delivered_at"] is None and "no delivery of it is in the evidence chain" in shown["delivery"], shown
    # the relay after that command tried it again (the receiver is still down): marked once more
    world.run_sql("UPDATE backfill_control.outbox SET delivered_at = '2026-01-01T00:00:00Z'")
    listed = run_cli("notices", "fix")
    assert listed.code == 0, listed.err
    assert "delivery: delivered at" not in listed.out, listed.out
    assert "no delivery of it is in the evidence chain" in listed.out, listed.out
    assert "1 undelivered" in listed.out, listed.out
