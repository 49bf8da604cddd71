"""The browser half of the e2e tests: Debian's Chromium, driven by Playwright, doing what a person
does in the Dagster UI (open an asset from the catalog, materialize a partition range through the
launch dialog, read a check's latest execution, read the asset's events) and taking screenshots.

No browser is ever downloaded: Playwright drives /usr/bin/chromium.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.e2e_support import ROOT

CHROMIUM = Path("/usr/bin/chromium")
# without the background-networking flags Chromium keeps calling home, and this machine's closed
# network refuses it, many times a second
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic"]
UI_TIMEOUT_MS = 60_000  # a busy 2-core machine: the UI's first GraphQL answers can take a while
SCREENSHOTS_ENV = "BACKFILL_SCREENSHOTS"
RECENT_DAYS = 90  # the launch dialog's default window for a daily asset (RECENT_PARTITIONS_DAYS)


@contextlib.contextmanager
def chromium() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_folder(default: Path) -> Path:
    """$BACKFILL_SCREENSHOTS (relative to the repository; `make screenshots` sets docs/screenshots),
    else `default` (a temp folder)."""
    configured = os.environ.get(SCREENSHOTS_ENV)
    folder = (ROOT / configured) if configured else default
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def save_screenshot(page, folder: Path, name: str) -> Path:
    path = folder / name
    page.wait_for_timeout(400)  # a dialog fades in: a shot taken at once shows it half transparent
    page.screenshot(path=str(path), animations="disabled")
    assert path.stat().st_size > 10_000, f"{path} is too small to show anything"
    return path


def open_asset_from_catalog(page, base_url: str, asset: str) -> None:
    """Catalog (the asset list), then the asset's row: its page opens on the Overview tab."""
    page.goto(f"{base_url}/assets")
    page.locator(f'a[href="/assets/{asset}"]').first.click()
    page.wait_for_url(f"**/assets/{asset}")
    page.get_by_role("button", name="Materialize…").wait_for()


@dataclass(frozen=True)
class DialogLaunch:
    backfill_id: str
    params: dict[str, Any]  # the LaunchBackfillParams the UI sent


def launch_range_from_materialize_dialog(page, asset: str, first: str, last: str, count: int, *,
                                         screenshot: Path | None = None) -> DialogLaunch:
    """On the asset's page: Materialize… opens the partitions dialog of a partitioned asset; type the
    range, check the dialog counted `count` partitions (screenshot it when asked), Launch backfill.
    Returns what the UI sent and the backfill id the server answered."""
    page.get_by_role("button", name="Materialize…").click()
    dialog = page.get_by_role("dialog")
    dialog.get_by_text(f"Launch runs to materialize {asset}").wait_for()
    dialog.get_by_text("Partition selection").wait_for()
    # By default the dialog offers only the last 90 days of a daily asset, behind a notice with a
    # "Show all partitions" link, and a range typed outside that window is refused in an error
    # dialog. The notice renders only once the partition keys have loaded, after the dialog itself:
    # CI once looked for it too early, found none and typed an older range into the window. So when
    # the range starts before the window, wait for the notice rather than ask whether it is there.
    if dt.date.fromisoformat(first[:10]) < dt.datetime.now(dt.UTC).date() - dt.timedelta(days=RECENT_DAYS):
        dialog.get_by_role("button", name="Show all partitions").click()
        dialog.get_by_text("Showing the last").wait_for(state="detached")
    selection = dialog.locator("input[type=text]").first
    selection.fill(f"[{first}...{last}]")
    selection.press("Enter")
    dialog.get_by_text(f"{count} partitions", exact=True).wait_for()
    if screenshot is not None:
        save_screenshot(page, screenshot.parent, screenshot.name)

    def is_launch(response) -> bool:
        return "/graphql" in response.url and "launchPartitionBackfill" in (response.request.post_data or "")

    with page.expect_response(is_launch) as answer:
        dialog.get_by_role("button", name="Launch backfill", exact=True).click()
    response = answer.value
    sent = json.loads(response.request.post_data)["variables"]["backfillParams"]
    result = response.json()["data"]["launchPartitionBackfill"]
    assert result["__typename"] == "LaunchBackfillSuccess", result
    page.get_by_text("Created backfill").first.wait_for()  # the UI's toast, with a link to it
    return DialogLaunch(result["backfillId"], sent)


def text_of(page, selector: str = "body") -> str:
    return page.locator(selector).first.inner_text()
