"""offload_overlap: profile-step's copy-overlap numbers as an Nsight Systems recipe.

``profile-step install-recipe`` copies this folder into nsys's
``nsys_recipe/recipes`` (with an ``install.json`` naming the project's
environment).  nsys runs it in the first ``python3`` on PATH; the work is
done by profile-step's own package (``profiler.recipes.mapper`` per report,
``profiler.recipes.tables`` for the parquet), so that Python must be able to
import it: the project's ``.venv/bin`` first on PATH, or a Python of the
same version, whose path then gets the environment recorded at install.
"""

from __future__ import annotations

import json
import site
import sys
from datetime import datetime
from pathlib import Path

from nsys_recipe import log
from nsys_recipe.lib import exceptions, nsys_path, recipe
from nsys_recipe.lib.args import Option
from nsys_recipe.log import logger

HERE = Path(__file__).resolve().parent
NOTEBOOK = "offload_overlap.ipynb"


def _import_profile_step() -> None:
    """Make ``profiler`` importable, or fail with one line that says how to run the recipe."""
    try:
        import profiler.recipes.mapper
        import profiler.recipes.tables

        return
    except ImportError as exc:
        problem = exc
    info_file = HERE / "install.json"
    info = json.loads(info_file.read_text()) if info_file.is_file() else {}
    version = "{}.{}".format(*sys.version_info[:2])
    if info and info.get("python_version") == version:
        for folder in info.get("site_packages", []):
            site.addsitedir(folder)
        if info.get("project_root") and info["project_root"] not in sys.path:
            sys.path.append(info["project_root"])
        try:
            import profiler.recipes.mapper
            import profiler.recipes.tables  # noqa: F401

            return
        except ImportError as exc:
            problem = exc
    run = f"PATH={info['venv_bin']}:$PATH nsys recipe offload_overlap" if info.get("venv_bin") else "nsys recipe"
    raise ImportError(
        f"this Python ({sys.executable}, {version}) cannot import profile-step ({problem}); "
        f"run the recipe with the project's environment first on PATH: {run} ..."
    ) from None


_import_profile_step()

from profiler.conventions import DEFAULT_RANK_PATTERN  # noqa: E402
from profiler.errors import ProfilerError  # noqa: E402
from profiler.recipes import mapper, tables  # noqa: E402


class ReportsFailed(exceptions.ValueError):
    """Some reports, not all, could not be read: the others' tables are kept."""


class OffloadOverlap(recipe.Recipe):
    """Per report (in the framework's mapper) profile-step's analysis; the reducer writes parquet."""

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_type is ReportsFailed:
            return False  # keep what the readable reports gave; nsys still exits 1
        return super().__exit__(exc_type, exc_val, exc_tb)

    @log.time("Mapper")
    def mapper_func(self, context, inputs: list[str]) -> list[dict]:
        args = self._parsed_args
        names = mapper.report_names(inputs)
        return context.wait(
            context.map(
                mapper.map_report,
                inputs,
                [names[p] for p in inputs],
                nsys=nsys_path.find_installed_file("nsys"),
                layer_pattern=args.layer_pattern,
                step_range=args.step_range,
                rank_pattern=args.rank_pattern,
            )
        )

    @log.time("Reducer")
    def reducer_func(self, results: list[dict]) -> list[dict]:
        failed = [r for r in results if "error" in r]
        readable = [r["rows"] for r in results if "rows" in r]
        if not readable:
            if len(failed) == 1:
                raise exceptions.ValueError(failed[0]["error"])
            for r in failed:
                logger.error(r["error"])
            raise exceptions.ValueError(f"none of the {len(failed)} reports could be read")
        for r in failed:
            logger.error(r["error"])
        folder = Path(self.get_output_dir())
        for path in tables.write(tables.merge(readable), folder, csv=self._parsed_args.csv):
            self.add_output_file(path.name, path.suffix.lstrip(".").capitalize())
        return failed

    def save_notebook(self) -> None:
        self.create_notebook(NOTEBOOK)

    def save_analysis_file(self, inputs: list[str], failed: list[dict]) -> None:
        self._analysis_dict.update(
            {
                "EndTime": str(datetime.now()),
                "InputFiles": inputs,
                "FailedFiles": {r["path"]: r["error"] for r in failed},
                "Outputs": self._output_files,
            }
        )
        self.create_analysis_file()

    def run(self, context):
        super().run(context)
        try:
            inputs = mapper.expand_inputs(self._parsed_args.input)
        except ProfilerError as exc:
            raise exceptions.ValueError(str(exc)) from None
        failed = self.reducer_func(self.mapper_func(context, inputs))
        self.save_notebook()
        self.save_analysis_file(inputs, failed)
        if failed:
            raise ReportsFailed(
                f"{len(failed)} of {len(inputs)} reports could not be read (named above); "
                f"the tables of the others are in {self.get_output_dir()}"
            )

    @classmethod
    def get_argument_parser(cls):
        parser = super().get_argument_parser()
        parser.add_recipe_argument(
            "--input",
            nargs="+",
            required=True,
            metavar="PATH",
            help="Reports (.nsys-rep, .qdrep), SQLite exports, folders of them (or of profile-step run "
            "folders), or globs. A report with its export beside it counts once, as the export.",
        )
        parser.add_recipe_argument(Option.OUTPUT)
        parser.add_recipe_argument(Option.FORCE_OVERWRITE)
        parser.add_recipe_argument(Option.CSV)
        parser.add_recipe_argument(
            "--layer-pattern",
            metavar="REGEX",
            default=None,
            help="Regex whose first group names the layer in XLA op_name paths (as in profile-step analyze)",
        )
        parser.add_recipe_argument(
            "--step-range",
            metavar="REGEX",
            default=None,
            help="NVTX range names that mark steps (default: profile-step's step=N ranges)",
        )
        parser.add_recipe_argument(
            "--rank-pattern",
            metavar="REGEX",
            default=DEFAULT_RANK_PATTERN,
            help="Regex whose first group is the rank in file or run folder names",
        )
        return parser
