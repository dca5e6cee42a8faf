"""``promem calibrate tau``: pick tau_comp for the configured embedder on a HaluMem-format sample."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from promem_fast.cli.common import build_config, config_args
from promem_fast.private import write_private


def register(sub: Any) -> None:
    p = sub.add_parser("calibrate", help="calibrate thresholds for the configured models")
    what = p.add_subparsers(dest="what", required=True, metavar="WHAT")
    tau = what.add_parser("tau", help="pick pipeline.tau_comp for the configured embedder and print the curve",
                          description="Run the draft and event abstraction on a HaluMem-format sample, then, for "
                                      "each tau from 0.30 to 0.95, count the events the completeness check would "
                                      "recover that reach a gold point the draft missed (useful) or one it already "
                                      "reached (redundant); the tau with the most useful minus redundant wins.")
    tau.add_argument("--data", type=Path, required=True, help="HaluMem JSONL (users with sessions and memory points)")
    tau.add_argument("--limit", type=int, help="only the first N users")
    tau.add_argument("--sessions", type=int, metavar="N", help="only the first N sessions of each user")
    tau.add_argument("--users", metavar="START:END", help="calibrate on the users at these positions of the file "
                     "(e.g. 0:5), and evaluate on the others (`promem eval halumem --users 5: --tau TAU.json`)")
    tau.add_argument("-o", "--output", type=Path, metavar="TAU.json",
                     help="write the chosen tau with its embedder, users, data sha256 and curve, for `promem eval "
                          "--tau`, which refuses it for another embedder or for users it was calibrated on")
    config_args(tau)
    tau.set_defaults(func=cmd_tau)


def cmd_tau(args: argparse.Namespace) -> int:
    import numpy as np

    from promem_fast.calibration import SessionVectors, candidates_program, choose, curve, table
    from promem_fast.engine import Engine
    from promem_fast.eval.datasets import load_benchmark
    from promem_fast.eval.split import select_users, tau_record

    if not args.data.is_file():
        print(f"promem: no such data file: {args.data}", file=sys.stderr)
        return 2
    config = build_config(args)
    bench = select_users(load_benchmark("halumem", args.data, args.limit, sessions=args.sessions), args.users)
    gold = {sid: [p.content for p in points] for user in bench.users
            for sid, points in user.memory_points_by_session().items()}
    sessions = bench.sessions
    with Engine(config) as engine:
        found = list(engine.run((s.session_id, lambda ctx, s=s: candidates_program(s, ctx)) for s in sessions))
        embed = engine.services.embedder.embed
        vectors = []
        for sid, value in found:
            if isinstance(value, BaseException):
                raise value
            events, draft = value
            texts = [*events, *draft, *gold.get(sid, [])]
            # one embedding call a session; its rows split back into events, draft and gold
            rows = np.asarray(embed(texts), np.float32) if texts else np.zeros((0, 1), np.float32)
            e, d = len(events), len(events) + len(draft)
            vectors.append(SessionVectors(rows[:e], rows[e:d], rows[d:]))
    points = curve(vectors)
    chosen = choose(points)
    name = config.embedder.model or f"{config.embedder.backend} default"
    print(f"embedder: {name} ({config.embedder.backend}); {len(sessions)} sessions of {args.data}")
    print(table(points, chosen))
    print(f"tau_comp = {chosen.tau:.2f} (set it with --set pipeline.tau_comp={chosen.tau:.2f})")
    if args.output:
        rows = [{"tau": p.tau, "recovered": p.recovered, "useful": p.useful, "redundant": p.redundant,
                 "gold_reached": p.gold_reached, "gold_total": p.gold_total} for p in points]
        record = tau_record(config, bench, args.data, chosen.tau, rows)
        write_private(args.output, json.dumps(record, indent=1))  # names the users it was fitted on
        print(f"tau record: {args.output} ({len(record['users'])} users; evaluate on others with --tau)")
    return 0
