"""``get``: download a public source from its publisher, check it, import it with attribution."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import UsageError
from ._common import add_format, emit, out_dir


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``get`` subcommand."""
    p = sub.add_parser(
        "get", help="download a public dataset (checked, resumable) and import it with its "
        "licence and citation", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Download a public power dataset from its publisher's own location, check "
        "its size and SHA-256 against the recipe, unpack it safely, import it and record its "
        "licence, citation and URL in the folder's card. An interrupted download resumes when "
        "the command is run again.",
        epilog="examples:\n  llm-powertrace get --list\n"
        "  llm-powertrace get mlenergy-v2-chat --out mlenergy\n"
        "  llm-powertrace get nlr-genai-power-profiles --from ~/Downloads/profiles --out nlr")
    p.add_argument("source", nargs="?", metavar="SOURCE", help="recipe name (see --list)")
    p.add_argument("--out", type=Path, default=None,
                   help="dataset folder (default: the source's name)")
    p.add_argument("--list", action="store_true",
                   help="list the recipes with licence and pinning (default: off)")
    p.add_argument("--recipes", type=Path, default=None, metavar="FILE",
                   help="a JSON/YAML file of your own recipes, searched first")
    p.add_argument("--from", dest="local_copy", type=Path, default=None, metavar="PATH",
                   help="a local copy (file or folder) instead of downloading; checked the same")
    p.add_argument("--allow-no-redistribution", action="store_true",
                   help="download a source whose licence does not allow redistribution "
                   "(private use; upload.py refuses it unless forced) (default: off)")
    p.add_argument("--allow-unpinned", action="store_true",
                   help="accept files the recipe gives no SHA-256 for (recorded as unpinned) "
                   "(default: off)")
    p.add_argument("--workload", choices=["finetune", "inference"], default=None,
                   help="what the source's traces ran, where the recipe does not say")
    p.add_argument("--platform", default=None,
                   help="platform slug, where the recipe does not say (default: the recipe's)")
    p.add_argument("--tz", default=None,
                   help="IANA zone of the source's zone-less timestamps (default: the recipe's, "
                   "else UTC)")
    add_format(p)
    p.set_defaults(func=cmd_get)


def cmd_get(args: argparse.Namespace) -> int:
    from ..sources.recipes import builtin_recipes, load_recipes

    if args.list:
        recipes = builtin_recipes()
        if args.recipes is not None:
            recipes.update(load_recipes(args.recipes))
        emit([{"source": r.name, "licence": r.licence,
               "download": ("local copy only (no redistribution licence)"
                            if not r.redistributable else "yes" if r.files
                            else "local copy only (no file list)"),
               "pinned": r.pinned, "format": r.fmt,
               "title": r.title} for r in sorted(recipes.values(), key=lambda r: r.name)],
             args.format, ["source", "licence", "download", "pinned", "format", "title"])
        return 0
    if not args.source:
        raise UsageError("get needs SOURCE (or --list)")
    from ..hooks import rebuild_card
    from ..sources.get import GetOptions, get_source

    out = out_dir(args.out or Path(args.source))
    options = GetOptions(recipes_file=args.recipes, local_copy=args.local_copy,
                         allow_no_redistribution=args.allow_no_redistribution,
                         allow_unpinned=args.allow_unpinned, workload=args.workload,
                         platform=args.platform, tz=args.tz)
    res = get_source(args.source, out, options)
    rebuild_card(out)
    emit([{"source": res.recipe.name, "licence": res.recipe.licence, "runs": len(res.run_ids),
           "files": len(res.files), "bytes": sum(f.size_bytes for f in res.files),
           "resumed": sum(f.resumed for f in res.files), "out": str(out)}], args.format,
         ["source", "licence", "runs", "files", "bytes", "resumed", "out"])
    return 0
