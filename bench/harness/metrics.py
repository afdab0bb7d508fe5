"""The servers' own view: /metrics scraped before and after a run, and what changed."""
import re

import requests

SERIES_RE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (\S+)$", re.M)


def scrape(url):
    """{series: value} with labels kept in the key (`name{a="b"}`); {} when unreachable."""
    try:
        text = requests.get(url + "/metrics", timeout=10).text
    except requests.RequestException:
        return {}
    out = {}
    for m in SERIES_RE.finditer(text):
        try:
            out[m.group(1) + (m.group(2) or "")] = float(m.group(3))
        except ValueError:
            pass
    return out


def deltas(before, after):
    """Counters that moved (names ending in _total, _count or _sum), and every gauge's value
    afterwards under `gauge:`; histogram buckets are left out (the client measures latency)."""
    out = {}
    for key, value in after.items():
        name = key.split("{", 1)[0]
        if name.endswith("_bucket"):
            continue
        if name.endswith(("_total", "_count", "_sum")):
            d = value - before.get(key, 0.0)
            if d:
                out[key] = d
    return out


def value(series, name, **labels):
    """Sum over the series named `name` whose labels include `labels`."""
    total = 0.0
    for key, v in series.items():
        n, _, rest = key.partition("{")
        if n != name:
            continue
        if all(f'{k}="{want}"' in rest for k, want in labels.items()):
            total += v
    return total
