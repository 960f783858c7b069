"""Which dashboard pages are wider than the screen, at phone, tablet and desktop widths.

    .venv/bin/python bench/page_widths.py [--widths 390,768,1280] [--url http://127.0.0.1:8000 --username admin --password admin]

Without --url it starts its own server on a free local port (`manage.py serve`, the
server `make run` starts) over a throwaway VAR_DIR loaded with the demo data, and logs in
as the administrator it creates. With --url it visits a running server instead (read
only: it only GETs pages). For every page and width, Debian's chromium (through
Playwright, never a downloaded browser) loads the page and compares
`document.documentElement.scrollWidth` with `innerWidth`: a page is *overflowing* when
the first is larger, i.e. the reader has to scroll sideways to see all of it.

Prints one line per page with its widest width at each viewport, then the count of
overflowing pages per width. Exit status 1 when any page overflows.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

BASE_DIR = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(BASE_DIR))

from bench.serving import HOST, free_port, wait_for  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]
WIDTHS = (390, 768, 1280)


def _ids(env: dict[str, str]) -> dict[str, str]:
    """Ids of one object of each kind that has a page, read from the server's database."""
    code = (
        "import django, json; django.setup();"
        "from facts.models import Candidate, ExtractionRun, FactCard;"
        "f = FactCard.objects.exclude(user_id='').order_by('pk').first(); r = ExtractionRun.objects.order_by('pk').first();"
        "c = Candidate.objects.filter(verdict='rejected').order_by('pk').first();"
        "print(json.dumps({'fact': f.pk, 'user': f.user_id or '', 'agent': f.agent_name or '',"
        " 'run': r.pk, 'candidate': c.pk}))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=BASE_DIR, check=True, capture_output=True)
    import json

    return json.loads(out.stdout.decode().strip().splitlines()[-1])


def pages(ids: dict[str, str]) -> list[str]:
    user = urllib.parse.quote(ids["user"])
    agent = urllib.parse.quote(ids["agent"])
    return [
        "/login/",
        "/",
        "/review/",
        "/review/?state=all",
        f"/review/{ids['candidate']}/",
        "/facts/",
        f"/facts/{ids['fact']}/",
        "/conflicts/",
        "/users/",
        f"/users/{user}/",
        "/people/",
        "/facts/add/",
        f"/people/user/?user={user}",
        f"/profiles/?user={user}",
        f"/preview/?user={user}&agent={agent}",
        f"/search/?user={user}&agent={agent}&q=python",
        "/index/",
        "/turns/",
        "/runs/",
        f"/runs/{ids['run']}/",
        "/gate/",
        "/gate/backtest/",
        f"/injections/?user={user}&agent={agent}",
        "/audit/",
        "/agents/",
        "/team/",
        f"/export/?user={user}",
    ]


def measure(base_url: str, username: str, password: str, urls: list[str], widths: tuple[int, ...]) -> dict:
    from playwright.sync_api import sync_playwright

    results: dict[str, dict[int, int]] = {url: {} for url in urls}
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        for width in widths:
            context = browser.new_context(viewport={"width": width, "height": 844}, base_url=base_url)
            page = context.new_page()
            page.goto("/login/")
            page.fill("input[name=username]", username)
            page.fill("input[name=password]", password)
            page.click("button[type=submit]")
            page.wait_for_load_state()
            for url in urls:
                if url == "/login/":
                    # The login page as a stranger sees it: a context without the session.
                    anon = browser.new_context(viewport={"width": width, "height": 844}, base_url=base_url)
                    view = anon.new_page()
                else:
                    anon, view = None, page
                response = view.goto(url)
                status = response.status if response else 0
                scroll = view.evaluate("document.documentElement.scrollWidth")
                inner = view.evaluate("window.innerWidth")
                results[url][width] = scroll if status == 200 else -status
                assert inner == width, (inner, width)
                if anon:
                    anon.close()
            context.close()
        browser.close()
    return results


def report(results: dict, widths: tuple[int, ...]) -> int:
    name_width = max(len(url) for url in results)
    print(f"{'page':<{name_width}}  " + "  ".join(f"{w:>7}" for w in widths))
    over = {w: 0 for w in widths}
    for url, by_width in results.items():
        cells = []
        for w in widths:
            scroll = by_width[w]
            if scroll < 0:
                cells.append(f"{'HTTP' + str(-scroll):>7}")
                continue
            wide = scroll > w
            over[w] += wide
            cells.append(f"{scroll:>6}{'!' if wide else ' '}")
        print(f"{url:<{name_width}}  " + "  ".join(cells))
    print(f"\nscrollWidth of each page in px; '!' marks a page wider than the viewport ({len(results)} pages).")
    for w in widths:
        print(f"{w:>5} px: {over[w]} of {len(results)} pages overflow")
    return 1 if any(over.values()) else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--url", help="a running server (default: start one on the demo data)")
    parser.add_argument("--username", default="admin")
    parser.add_argument("--password", default="admin")
    args = parser.parse_args()
    widths = tuple(int(w) for w in args.widths.split(","))
    if not Path(CHROMIUM).exists():
        raise SystemExit("Debian's chromium is missing: `make browser-deps` installs it")

    if args.url:
        env = dict(os.environ, DJANGO_SETTINGS_MODULE="memoryadmin.settings")
        return report(measure(args.url.rstrip("/"), args.username, args.password, pages(_ids(env)), widths), widths)

    with tempfile.TemporaryDirectory(prefix="page-widths-") as var:
        env = dict(
            os.environ,
            DJANGO_SETTINGS_MODULE="memoryadmin.settings",
            VAR_DIR=var,
            ADMIN_USERNAME=args.username,
            ADMIN_PASSWORD=args.password,
            MEMORY_EMBEDDINGS="off",
            LOGIN_THROTTLE="false",
        )
        env.pop("DATABASE_URL", None)
        env.pop("MEMORY_ROOT", None)
        python = str(BASE_DIR / ".venv" / "bin" / "python")
        manage = [python, str(BASE_DIR / "manage.py")]
        started = time.monotonic()
        # bootstrap migrates, creates the administrator and loads the demo (here, not queued).
        subprocess.run(
            [*manage, "bootstrap"],
            env=env,
            check=True,
            cwd=BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        port = free_port()
        server = subprocess.Popen(
            [*manage, "serve", "--listen", f"{HOST}:{port}"],
            env=env,
            cwd=BASE_DIR,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(port, server, "/login/")
            print(f"(demo data and server ready in {time.monotonic() - started:.0f} s)\n", file=sys.stderr)
            results = measure(f"http://{HOST}:{port}", args.username, args.password, pages(_ids(env)), widths)
        finally:
            server.terminate()
            server.wait(timeout=10)
    return report(results, widths)


if __name__ == "__main__":
    raise SystemExit(main())
