# Copyright: Contributors to the dgxspark.cluster collection
# SPDX-License-Identifier: GPL-3.0-or-later
"""The benchmark client of playbooks/bench.yml, run on the bench host.

Standard library only: it runs on a node's system Python (``python3 FILE``),
copied there by the bench role. It measures and records, nothing more; every
statistic (percentiles, rates, metric deltas, tables) is computed on the
controller from what it prints (module_utils/_bench.py), so the raw numbers
stay in the report and the tables can be recomputed from them.

Subcommands:

* ``check``: every replica head answers ``/version`` and ``/v1/models`` with
  the served model; otherwise it exits 2 at once with one line naming the URL
  and what was found (the benchmark of a cluster that does not serve stops
  before measuring anything).
* ``wave``: one wave (``--spec`` JSON): C concurrent streaming completions,
  ``temperature 0``, ``ignore_eos`` and a fixed ``max_tokens``. Kinds:
  ``context`` (a cold prime, then the exact same prompt again: a prefix-cache
  hit), ``cold`` (C unique prompts), ``shared`` (one C=1 prime, then C copies
  of the same prompt), ``quality`` (prompt/answer pairs, answers returned).
  A request that passes its timeout is recorded as failed; the wave goes on.
  The selected counter lines of every head's ``/metrics`` are read before and
  after the wave. Prints one JSON object.
* ``sample``: on every node during the run: GPU power (``nvidia-smi``) and the
  fabric HCAs' error counters every ``--interval`` seconds, one JSON line per
  sample, until ``--stop-file`` exists or ``--duration`` has passed.

The API key is read from a file (``--key-file``, mode 0600), never argv.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import subprocess
import sys
import threading
import time
from urllib.parse import urlsplit

EXIT_FAILURE = 2

# A fixed vocabulary: prompts are deterministic for a seed, so two runs of
# the same profile send the same text.
WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his",
    "her", "it", "an", "were", "are", "which", "this", "be", "or", "have", "had", "one", "not", "but", "all",
    "they", "their", "been", "has", "there", "who", "more", "when", "will", "would", "no", "out", "so", "up",
    "said", "what", "about", "into", "than", "them", "can", "only", "other", "new", "some", "could", "time",
    "these", "two", "may", "then", "do", "first", "any", "my", "now", "such", "like", "our", "over", "man",
    "me", "even", "most", "made", "after", "also", "did", "many", "before", "must", "through", "back",
    "years", "where", "much", "your", "way", "well", "down", "should", "because", "each", "just", "those",
    "people", "how", "too", "little", "state", "good", "very", "make", "world", "still", "own", "see", "men",
    "work", "long", "get", "here", "between", "both", "life", "being", "under", "never", "day", "same",
    "another", "know", "while", "last", "might", "us", "great", "old", "year", "off", "come", "since",
    "against", "go", "came", "right", "used", "take", "three", "river", "mountain", "garden", "letter",
    "window", "morning", "evening", "harbour", "lantern", "copper", "meadow", "signal", "engine", "valley",
    "winter", "summer", "orchard", "bridge", "station", "market", "needle", "thread",
)

PORT_COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "port_xmit_discards",
                 "port_rcv_remote_physical_errors")
NETDEV_COUNTERS = ("rx_crc_errors", "rx_dropped", "tx_dropped", "rx_errors")


class BenchError(Exception):
    pass


def read_key(path):
    if not path:
        return ""
    with open(path, encoding="utf-8") as handle:
        return handle.read().strip()


def _connection(url, timeout):
    parts = urlsplit(url)
    return http.client.HTTPConnection(parts.hostname, parts.port or 80, timeout=timeout), parts.path.rstrip("/")


def http_json(url, path, key, body=None, timeout=10.0):
    """(status, parsed JSON or text) of one request."""
    conn, base = _connection(url, timeout)
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = "Bearer " + key
    try:
        conn.request("POST" if body is not None else "GET", base + path,
                     body=json.dumps(body) if body is not None else None, headers=headers)
        response = conn.getresponse()
        data = response.read().decode("utf-8", "replace")
        try:
            return response.status, json.loads(data)
        except ValueError:
            return response.status, data
    finally:
        conn.close()


def metric_lines(url, key, names):
    """The lines of url's /metrics whose metric name starts with one of names."""
    status, text = http_json(url, "/metrics", key)
    if status != 200 or not isinstance(text, str):
        return {"error": "HTTP %s" % status, "lines": []}
    return {"lines": [line for line in text.splitlines() if line.startswith(tuple(names))]}


def check(urls, model, key, timeout):
    """Every head answers with the served model; one line per problem."""
    problems = []
    versions = {}
    for url in urls:
        try:
            status, version = http_json(url, "/version", key, timeout=timeout)
            models_status, models = http_json(url, "/v1/models", key, timeout=timeout)
        except (OSError, http.client.HTTPException) as exc:
            problems.append("%s: no engine answers (%s)" % (url, exc))
            continue
        if status != 200 or models_status != 200:
            problems.append("%s: /version answered HTTP %s, /v1/models HTTP %s" % (url, status, models_status))
            continue
        served = [entry.get("id") for entry in models.get("data", [])] if isinstance(models, dict) else []
        if model not in served:
            problems.append("%s serves %s, not %s" % (url, served, model))
            continue
        versions[url] = version.get("version") if isinstance(version, dict) else version
    return versions, problems


def synthetic_text(seed, words):
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _word in range(words))


def sized_prompt(url, model, key, seed, tokens, corpus=None):
    """(prompt, tokens) of `tokens` tokens as the engine's tokenizer counts
    them: words from the corpus (or the synthetic vocabulary) at a place the
    seed chooses, tokenized by /tokenize, cut to the length and turned back
    into text by /detokenize. The seed leads the text, so prompts of two seeds
    share no cached prefix."""
    words = tokens
    for _attempt in range(4):
        if corpus:
            start = random.Random(seed).randrange(max(1, len(corpus) - words))
            text = "[%s] %s" % (seed, " ".join(corpus[start:start + words]))
        else:
            text = "[%s] %s" % (seed, synthetic_text(seed, words))
        status, answer = http_json(url, "/tokenize", key, {"model": model, "prompt": text, "add_special_tokens": False})
        if status != 200 or not isinstance(answer, dict):
            raise BenchError("%s/tokenize answered HTTP %s: %s" % (url, status, str(answer)[:200]))
        if len(answer["tokens"]) >= tokens:
            break
        words *= 2
    ids = answer["tokens"][:tokens]
    status, answer = http_json(url, "/detokenize", key, {"model": model, "tokens": ids})
    if status != 200 or not isinstance(answer, dict):
        raise BenchError("%s/detokenize answered HTTP %s: %s" % (url, status, str(answer)[:200]))
    return answer["prompt"], len(ids)


def stream_completion(url, model, key, prompt, max_tokens, timeout, ignore_eos=True):
    """One streaming completion, timed. A request that passes its timeout
    or fails in any way comes back with ok false and the reason."""
    record = {"url": url, "ok": False, "error": None, "ttft": None, "latency": None,
              "prompt_tokens": None, "completion_tokens": 0, "text": ""}
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0,
            "stream": True, "stream_options": {"include_usage": True}}
    if ignore_eos:
        body.update({"ignore_eos": True, "min_tokens": max_tokens})
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream"}
    if key:
        headers["Authorization"] = "Bearer " + key
    start = time.monotonic()
    deadline = start + timeout
    record["started"] = time.time()
    chunks = 0
    last = None
    conn = None
    try:
        conn, base = _connection(url, timeout)
        conn.request("POST", base + "/v1/completions", body=json.dumps(body), headers=headers)
        # Kept before getresponse(): a response that closes the connection
        # takes the socket from the connection object.
        sock = conn.sock
        response = conn.getresponse()
        if response.status != 200:
            record["error"] = "HTTP %s: %s" % (response.status, response.read(300).decode("utf-8", "replace"))
            return record
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise TimeoutError()
            sock.settimeout(remaining)
            line = response.readline()
            if not line:
                break
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                break
            event = json.loads(data)
            for choice in event.get("choices") or []:
                # A token whose bytes end inside a UTF-8 character streams as
                # empty text (the engine holds the bytes back): it still
                # arrived, so it counts for TTFT and decode timing.
                if "text" in choice:
                    now = time.monotonic()
                    if record["ttft"] is None:
                        record["ttft"] = now - start
                    last = now
                    chunks += 1
                    record["text"] += choice["text"]
            usage = event.get("usage")
            if usage:
                record["prompt_tokens"] = usage.get("prompt_tokens")
                record["completion_tokens"] = usage.get("completion_tokens") or 0
        if time.monotonic() > deadline:
            raise TimeoutError()
        record["latency"] = time.monotonic() - start
        if not record["completion_tokens"]:
            record["completion_tokens"] = chunks
        record["decode_seconds"] = (last - start - record["ttft"]) if record["ttft"] is not None else None
        record["ok"] = record["ttft"] is not None
        if not record["ok"]:
            record["error"] = "no token streamed"
    except TimeoutError:
        record["error"] = "timeout after %gs" % timeout
    except (OSError, http.client.HTTPException, ValueError) as exc:
        record["error"] = "%s: %s" % (type(exc).__name__, exc)
    finally:
        if conn is not None:
            conn.close()
    return record


def run_concurrently(jobs):
    """Run the callables at once, each in its own thread; their results in order."""
    results = [None] * len(jobs)

    def runner(index, job):
        results[index] = job()

    threads = [threading.Thread(target=runner, args=(i, job), daemon=True) for i, job in enumerate(jobs)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


def run_wave(spec, key):
    urls = spec["urls"]
    model = spec["model"]
    kind = spec["kind"]
    concurrency = int(spec.get("concurrency", 1))
    max_tokens = int(spec.get("max_tokens", 16))
    timeout = float(spec.get("timeout", 60))
    seed = spec.get("seed", "bench")
    corpus = None
    if spec.get("corpus_file"):
        with open(spec["corpus_file"], encoding="utf-8", errors="replace") as handle:
            corpus = handle.read().split()
    out = {"kind": kind, "concurrency": concurrency, "max_tokens": max_tokens, "timeout": timeout,
           "prompt_tokens_target": spec.get("prompt_tokens"), "label": spec.get("label", kind),
           "prime": None}

    def send(url, prompt, **kwargs):
        return lambda: stream_completion(url, model, key, prompt, max_tokens, timeout, **kwargs)

    jobs = []
    if kind == "context":
        repeats = int(spec.get("repeats", 1))
        prompts = [sized_prompt(urls[0], model, key, "%s-ctx%d" % (seed, i), int(spec["prompt_tokens"]), corpus)[0]
                   for i in range(repeats)]
        # The prime is the cold measurement here: it is part of the table.
        out["metrics_before"] = {url: metric_lines(url, key, spec["metric_names"]) for url in urls}
        out["started"] = time.time()
        requests = []
        for index, prompt in enumerate(prompts):
            cold = stream_completion(urls[0], model, key, prompt, max_tokens, timeout)
            hit = stream_completion(urls[0], model, key, prompt, max_tokens, timeout)
            cold["phase"], hit["phase"] = "cold", "cache_hit"
            cold["repeat"] = hit["repeat"] = index
            requests += [cold, hit]
    else:
        if kind == "cold":
            prompts = [sized_prompt(urls[i % len(urls)], model, key, "%s-%d" % (seed, i),
                                    int(spec["prompt_tokens"]), corpus)[0] for i in range(concurrency)]
            jobs = [send(urls[i % len(urls)], prompts[i]) for i in range(concurrency)]
        elif kind == "shared":
            prompt = sized_prompt(urls[0], model, key, "%s-shared" % seed, int(spec["prompt_tokens"]), corpus)[0]
            # One C=1 prime per replica, outside the measured wave.
            out["prime"] = [stream_completion(url, model, key, prompt, max_tokens, timeout) for url in urls]
            jobs = [send(urls[i % len(urls)], prompt) for i in range(concurrency)]
        elif kind == "quality":
            pairs = spec["pairs"]
            count = max(concurrency, len(pairs))
            jobs = [send(urls[i % len(urls)], pairs[i % len(pairs)]["prompt"], ignore_eos=False) for i in range(count)]
        else:
            raise BenchError("unknown wave kind %r" % kind)
        out["metrics_before"] = {url: metric_lines(url, key, spec["metric_names"]) for url in urls}
        out["started"] = time.time()
        requests = []
        # Quality pairs beyond C go in further rounds of C at a time.
        for offset in range(0, len(jobs), concurrency):
            requests += run_concurrently(jobs[offset:offset + concurrency])
        if kind == "quality":
            for index, record in enumerate(requests):
                record["pair"] = index % len(spec["pairs"])
    out["finished"] = time.time()
    out["metrics_after"] = {url: metric_lines(url, key, spec["metric_names"]) for url in urls}
    if kind != "quality":
        for record in requests:
            record["text"] = record["text"][:80]
    out["requests"] = requests
    return out


def read_counters(sysfs_root, hca, port, netdev):
    counters = {}
    port_dir = os.path.join(sysfs_root, "class", "infiniband", hca, "ports", str(port), "counters")
    for name in PORT_COUNTERS:
        counters["%s/%s" % (hca, name)] = _read_int(os.path.join(port_dir, name))
    if netdev:
        stats = os.path.join(sysfs_root, "class", "net", netdev, "statistics")
        for name in NETDEV_COUNTERS:
            counters["%s/%s" % (hca, name)] = _read_int(os.path.join(stats, name))
    return {name: value for name, value in counters.items() if value is not None}


def _read_int(path):
    try:
        with open(path, encoding="ascii") as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        return None


def read_power(nvidia_smi):
    """Watts per GPU from nvidia-smi; [] when it does not answer (a GB10
    that reports no power reads as [N/A])."""
    try:
        output = subprocess.run([nvidia_smi, "--query-gpu=power.draw", "--format=csv,noheader,nounits"],
                                capture_output=True, text=True, timeout=5, check=False).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    watts = []
    for line in output.splitlines():
        try:
            watts.append(float(line.strip()))
        except ValueError:
            continue
    return watts


def sample(args):
    links = [link.split(":") for link in args.link]
    end = time.monotonic() + args.duration
    with open(args.out, "w", encoding="utf-8") as out:
        while True:
            counters = {}
            for hca, netdev in links:
                counters.update(read_counters(args.sysfs_root, hca, args.port, netdev))
            out.write(json.dumps({"t": time.time(), "power": read_power(args.nvidia_smi), "counters": counters}) + "\n")
            out.flush()
            if os.path.exists(args.stop_file) or time.monotonic() > end:
                return 0
            time.sleep(args.interval)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    check_parser = sub.add_parser("check")
    check_parser.add_argument("--url", action="append", required=True)
    check_parser.add_argument("--model", required=True)
    check_parser.add_argument("--key-file")
    check_parser.add_argument("--timeout", type=float, default=5.0)
    wave_parser = sub.add_parser("wave")
    wave_parser.add_argument("--spec", required=True, help="the wave as JSON")
    wave_parser.add_argument("--key-file")
    sample_parser = sub.add_parser("sample")
    sample_parser.add_argument("--out", required=True)
    sample_parser.add_argument("--stop-file", required=True)
    sample_parser.add_argument("--interval", type=float, default=1.0)
    sample_parser.add_argument("--duration", type=float, default=3600.0)
    sample_parser.add_argument("--nvidia-smi", default="nvidia-smi")
    sample_parser.add_argument("--sysfs-root", default="/sys")
    sample_parser.add_argument("--port", default="1")
    sample_parser.add_argument("--link", action="append", default=[], help="HCA:netdev")
    args = parser.parse_args(argv)
    try:
        if args.command == "check":
            versions, problems = check(args.url, args.model, read_key(args.key_file), args.timeout)
            if problems:
                sys.stderr.write("; ".join(problems) + "\n")
                return EXIT_FAILURE
            sys.stdout.write(json.dumps({"versions": versions}) + "\n")
            return 0
        if args.command == "wave":
            sys.stdout.write(json.dumps(run_wave(json.loads(args.spec), read_key(args.key_file))) + "\n")
            return 0
        return sample(args)
    except (BenchError, OSError, http.client.HTTPException) as exc:
        sys.stderr.write("bench %s: %s\n" % (args.command, exc))
        return EXIT_FAILURE


if __name__ == "__main__":
    sys.exit(main())  # pylint: disable=ansible-bad-function
