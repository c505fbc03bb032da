"""The start-up hook profile-step installs in the profiled script's interpreter.

``run.py`` puts ``profiler/capture/hook/`` first on the child's ``PYTHONPATH``;
its ``sitecustomize.py`` chains to any other ``sitecustomize`` and calls
:func:`install`.  Once JAX is imported the hook:

- names each compiled program of the script's ``jax.jit`` functions as XLA does: its module
  name and program id (the id of its ``module_NNNN`` dump files), read once per executable
  from its HLO module proto;
- where XLA writes no NVTX of its own (XLA:CPU), writes one range per execution of each such
  program (domain ``profile-step``, named as XLA names its own:
  ``XlaModule:#hlo_module=NAME,program_id=N#``) and one around each compilation
  (``XlaCompile:#module=NAME#``: compilation is warm-up).  To see every execution, JAX's C++
  dispatch fast path is turned off for those functions (``benchmarks/hook_cost.py`` measures
  what that costs per call).  On a GPU XLA writes both kinds of range itself: the hook only
  names the programs, and the fast path stays.  JAX's own jitted functions (``jnp.sum``,
  ``jax.random.normal``) and operations run one at a time are never recorded;
- merges profile-step's XLA flags (``$PROFILE_STEP_XLA_PRESETS``) into
  ``XLA_FLAGS`` just before JAX starts its first backend, so that a script
  that assigns ``os.environ["XLA_FLAGS"]`` itself keeps the dump and the
  command-buffer setting;
- writes ``startup.json`` in the run folder: Python, jax, jaxlib, devices,
  the flags in force and the executions per program.

Every failure is swallowed (and noted in ``startup.json``): the hook never
breaks the user's script.  ``PROFILE_STEP_HOOK=0`` turns it off.
"""

from __future__ import annotations

import json
import os
import platform
import sys
import threading
from typing import Any

from profiler.capture.jax_own import jax_internal
from profiler.capture.xla_flags import parse as parse_flags
from profiler.conventions import (
    DOMAIN,
    HOOK_ENV,
    RUN_DIR_ENV,
    STARTUP_FACTS,
    TUNE_FDS_ENV,
    TUNE_POLICY_ENV,
    XLA_PRESETS_ENV,
)

PRESETS_ENV = XLA_PRESETS_ENV  # JSON: {"flags": {name: value}, "force": [names]}
MODULE_RANGE = "XlaModule:#hlo_module={},program_id={}#"  # as XLA names its own (xla.names.parse_xla reads both)
MODULE_RANGE_NO_ID = "XlaModule:#hlo_module={}#"
COMPILE_RANGE = "XlaCompile:#module={}#"
XLA_NVTX_PLATFORMS = ("gpu", "cuda", "rocm")  # where XLA writes its own XlaModule and XlaCompile ranges

_facts: dict[str, Any] = {"hook": "installed", "python": platform.python_version(), "notes": []}
_counts: dict[tuple[str, int | None], int] = {}  # (module name, program id) -> executions
_uncounted: dict[tuple[str, int | None], str] = {}  # programs whose executions XLA records itself -> platform
_lock = threading.Lock()


def note(text: str) -> None:
    """Keep *text* for ``startup.json`` (at most 20 notes)."""
    if len(_facts["notes"]) < 20:
        _facts["notes"].append(text)


def write_facts() -> None:
    """Write ``startup.json`` into the run folder; never raises."""
    run_dir = os.environ.get(RUN_DIR_ENV)
    if not run_dir:
        return
    try:
        path = os.path.join(run_dir, STARTUP_FACTS)
        if "jax" not in _facts and os.path.exists(path):
            return  # a process the script started that never imported JAX: the JAX process's facts stay
        with _lock:
            runs = sorted(_counts.items(), key=lambda kv: (-kv[1], kv[0][0], kv[0][1] or 0))
            doc = {
                **_facts,
                "executions": [{"module": n, "program_id": p, "executions": c} for (n, p), c in runs],
                "programs_uncounted": [
                    {"module": n, "program_id": p, "platform": f} for (n, p), f in _uncounted.items()
                ],
            }
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as fh:
            json.dump(doc, fh, indent=2, default=str)
        os.replace(tmp, path)
    except Exception:
        pass


# --- XLA_FLAGS ---------------------------------------------------------------------------------
def merged_flags(current: str, presets: dict[str, str], force: list[str]) -> tuple[str, list[str]]:
    """*current* with *presets* added where absent (and the *force*d ones set); the names added."""
    flags = parse_flags(current)
    added = []
    for name, value in presets.items():
        if name not in flags or (name in force and flags[name] != value):
            flags[name] = value
            added.append(name)
    text = " ".join(k if v is None else f"{k}={v}" for k, v in flags.items())
    return text, added


def keep_xla_flags() -> None:
    """Put profile-step's flags back into ``XLA_FLAGS`` if the script replaced them."""
    try:
        doc = json.loads(os.environ.get(PRESETS_ENV) or "{}")
        presets, force = doc.get("flags") or {}, doc.get("force") or []
        current = os.environ.get("XLA_FLAGS", "")
        text, added = merged_flags(current, presets, force)
        if added:
            os.environ["XLA_FLAGS"] = text
        _facts["xla_flags"] = {
            "at_backend_start": current,
            "in_force": text,
            "put_back": added,
            "script_changed": current != _facts.get("xla_flags_at_start"),
        }
    except Exception as exc:
        note(f"keeping profile-step's XLA flags failed: {type(exc).__name__}: {exc}")


# --- JAX ---------------------------------------------------------------------------------------
def _nvtx_pair() -> tuple[Any, Any] | None:
    """(push(name), pop()) in the profile-step domain, or None without the nvtx binding."""
    try:
        import nvtx
    except Exception:
        note("no nvtx binding: executions are counted, not recorded in the trace")
        return None
    try:
        from nvtx import _lib

        dom = nvtx.get_domain(DOMAIN)
        attrs: dict[str, Any] = {}

        def push(name: str) -> None:
            a = attrs.get(name)
            if a is None:
                a = attrs[name] = dom.get_event_attributes(message=name, color="orange")
            _lib.push_range(a, dom.handle)

        def pop() -> None:
            _lib.pop_range(dom.handle)

        from importlib.metadata import version

        _facts["nvtx_binding"] = version("nvtx")
        return push, pop
    except Exception:
        return (lambda name: nvtx.push_range(name, domain=DOMAIN)), (lambda: nvtx.pop_range(domain=DOMAIN))


def proto_id(data: bytes) -> int | None:
    """The ``id`` (field 5) of a serialized ``HloModuleProto``: the program id, read without parsing
    the computations (a walk over the top-level fields, each skipped by its length).  ``hlo.proto``
    is proto3, which writes no field holding its default: a whole message without field 5 is
    program 0 (the first module a process compiles); None: not a whole message."""

    def varint(i: int) -> tuple[int, int]:
        value = shift = 0
        while True:
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                return value, i

    i = 0
    try:
        while i < len(data):
            key, i = varint(i)
            field, wire = key >> 3, key & 7
            if wire == 0:
                value, i = varint(i)
                if field == 5:
                    return value
            elif wire == 2:
                size, i = varint(i)
                i += size
            elif wire in (1, 5):
                i += 8 if wire == 1 else 4
            else:
                return None
    except IndexError:
        return None
    return 0 if data and i == len(data) else None


def program_of(call: Any) -> tuple[str, int | None, str | None]:
    """(module name, program id, platform) of an executable JAX calls (``pxla.ExecuteReplicated``)."""
    exe = getattr(call, "xla_executable", None)
    try:
        module = exe.hlo_modules()[0]
        name = module.name
    except Exception:
        return str(getattr(call, "name", "unknown")), None, None
    try:
        pid = proto_id(module.as_serialized_hlo_module_proto())
    except Exception:
        pid = None
    try:
        platform = str(exe.client.platform).lower()
    except Exception:
        platform = None
    return name, pid, platform


def patch_jax() -> None:
    """Record every execution of a ``jax.jit`` executable; keep the XLA flags at backend start."""
    import weakref

    import jax

    try:
        import jaxlib

        _facts["jax"], _facts["jaxlib"] = jax.__version__, jaxlib.__version__
    except Exception:
        _facts["jax"] = getattr(jax, "__version__", None)
    _patch_backend_start()
    try:
        from jax._src import pjit
        from jax._src.interpreters import pxla
    except Exception as exc:
        note(f"this JAX has no pjit/pxla to hook ({type(exc).__name__}); executions not recorded")
        return
    needed = [(pjit, "_run_python_pjit"), (pjit, "_get_fastpath_data"), (pxla, "ExecuteReplicated")]
    missing = [name for mod, name in needed if not hasattr(mod, name)]
    if missing:
        note(f"this JAX lacks {', '.join(missing)}; executions not recorded")
        return
    user: weakref.WeakSet[Any] = weakref.WeakSet()  # the script's executables whose executions are recorded
    # per executable: its range name, (module name, program id), whether its executions are recorded
    seen: weakref.WeakKeyDictionary[Any, tuple[str, tuple[str, int | None], bool]] = weakref.WeakKeyDictionary()
    ranges = None if os.environ.get(HOOK_ENV) == "count" else _nvtx_pair()  # count: no NVTX ranges
    run_python, fastpath = pjit._run_python_pjit, pjit._get_fastpath_data
    execute = pxla.ExecuteReplicated.__call__

    inside = threading.local()  # set while a jax.jit call runs through Python (its first execution)

    def _first_seen(call: Any) -> tuple[str, tuple[str, int | None], bool]:
        """The range name of a script's executable, and whether its executions are recorded here
        (not where XLA writes its own ranges: there the C++ fast path stays)."""
        name, pid, platform = program_of(call)
        recorded = platform not in XLA_NVTX_PLATFORMS
        with _lock:
            if not recorded:
                _uncounted[(name, pid)] = platform or "unknown"
        text = MODULE_RANGE.format(name, pid) if pid is not None else MODULE_RANGE_NO_ID.format(name)
        seen[call] = (text, (name, pid), recorded)
        if recorded:
            user.add(call)
        return seen[call]

    def _run_python_pjit(*args: Any, **kwargs: Any) -> Any:
        fun = args[2] if len(args) > 2 else kwargs.get("fun")
        if jax_internal(fun):  # jnp.sum, jax.random.normal, one op run eagerly: JAX's, not the script's
            return run_python(*args, **kwargs)
        depth = getattr(inside, "depth", 0)
        inside.depth = depth + 1
        try:
            out = run_python(*args, **kwargs)
        finally:
            inside.depth = depth
        try:
            call = getattr(out[5], "unsafe_call", None)
            if isinstance(call, pxla.ExecuteReplicated) and call not in seen:
                _first_seen(call)
        except Exception:
            pass
        return out

    def _get_fastpath_data(executable: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            if getattr(executable, "unsafe_call", None) in user:
                return None  # back through Python next call too, so that the execution is seen
        except Exception:
            pass
        return fastpath(executable, *args, **kwargs)

    def __call__(self: Any, *args: Any) -> Any:
        try:
            known = seen.get(self)
            if known is None and getattr(inside, "depth", 0) > 0:
                known = _first_seen(self)
            mine = known is not None and known[2]
            if mine:
                with _lock:
                    _counts[known[1]] = _counts.get(known[1], 0) + 1
                if ranges is not None:
                    ranges[0](known[0])
        except Exception:
            mine = False
        try:
            return execute(self, *args)
        finally:
            if mine and ranges is not None:
                try:  # noqa: SIM105 - the hot path: a plain try costs less than contextlib.suppress
                    ranges[1]()
                except Exception:
                    pass

    pjit._run_python_pjit = _run_python_pjit
    pjit._get_fastpath_data = _get_fastpath_data
    pxla.ExecuteReplicated.__call__ = __call__
    # jit(f).lower(...).compile(): its C++ call returns to Python only without a fast path
    mesh_exec = getattr(pxla, "MeshExecutable", None)
    if mesh_exec is not None and hasattr(mesh_exec, "create_cpp_call"):
        cpp_call = mesh_exec.create_cpp_call

        def create_cpp_call(self: Any, params: Any) -> Any:
            try:
                call = getattr(self, "unsafe_call", None)
                if isinstance(call, pxla.ExecuteReplicated) and _first_seen(call)[2]:
                    return None
            except Exception:
                pass
            return cpp_call(self, params)

        mesh_exec.create_cpp_call = create_cpp_call
    if ranges is not None:
        _patch_compile(*ranges)
    _facts["executions_recorded"] = ranges is not None


def _patch_compile(push: Any, pop: Any) -> None:
    """One ``XlaCompile:#module=NAME#`` range around each compilation where XLA writes none itself."""
    try:
        from jax._src import compiler
        from jax._src.lib.mlir import ir

        compile_fn = compiler.compile_or_get_cached
    except Exception as exc:
        note(f"this JAX has no compiler.compile_or_get_cached ({type(exc).__name__}); compilations not recorded")
        return

    def compile_or_get_cached(backend: Any, computation: Any, *args: Any, **kwargs: Any) -> Any:
        pushed = False
        try:
            if str(getattr(backend, "platform", "")).lower() not in XLA_NVTX_PLATFORMS:
                push(COMPILE_RANGE.format(ir.StringAttr(computation.operation.attributes["sym_name"]).value))
                pushed = True
        except Exception:
            pass
        try:
            return compile_fn(backend, computation, *args, **kwargs)
        finally:
            if pushed:
                try:  # noqa: SIM105
                    pop()
                except Exception:
                    pass

    compiler.compile_or_get_cached = compile_or_get_cached


def _patch_backend_start() -> None:
    try:
        from jax._src import xla_bridge
    except Exception as exc:
        note(f"this JAX has no xla_bridge ({type(exc).__name__}); XLA_FLAGS not guarded")
        return
    init = getattr(xla_bridge, "_init_backend", None)
    if init is None:
        note("this JAX has no xla_bridge._init_backend; XLA_FLAGS not guarded")
        return
    state = {"first": True}

    def first() -> None:
        if state["first"]:
            state["first"] = False
            keep_xla_flags()
            write_facts()

    discover = getattr(xla_bridge, "_discover_and_register_pjrt_plugins", None)
    if discover is not None:  # a GPU plugin loads here, before any backend starts: the flags first

        def _discover_and_register_pjrt_plugins(*args: Any, **kwargs: Any) -> Any:
            first()
            return discover(*args, **kwargs)

        xla_bridge._discover_and_register_pjrt_plugins = _discover_and_register_pjrt_plugins

    def _init_backend(platform_name: str) -> Any:
        first()
        client = init(platform_name)
        try:
            devices = _facts.setdefault("devices", [])
            for d in client.local_devices():
                devices.append({"id": d.id, "kind": d.device_kind, "platform": d.platform})
            _facts.setdefault("backends", []).append(platform_name)
            write_facts()
        except Exception as exc:
            note(f"reading the {platform_name} devices failed: {type(exc).__name__}")
        return client

    xla_bridge._init_backend = _init_backend


# --- import watch ------------------------------------------------------------------------------
class _JaxWatch:
    """A meta-path finder that patches JAX right after ``import jax`` finishes."""

    done = False

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "jax" or self.done:
            return None
        import importlib.machinery

        self.done = True  # left in sys.meta_path: removing it while Python walks the list skips a finder
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        loader = spec.loader
        exec_module = loader.exec_module

        def exec_then_patch(module: Any) -> None:
            exec_module(module)
            _after_jax()

        loader.exec_module = exec_then_patch  # type: ignore[method-assign]
        return spec


def _after_jax() -> None:
    if os.environ.get(TUNE_POLICY_ENV):  # tune --verify: the candidate's policy for the script's checkpoints
        try:
            from profiler.xla import policy_swap

            policy_swap.use(json.loads(os.environ[TUNE_POLICY_ENV]))
            _facts["tune_policy"] = os.environ[TUNE_POLICY_ENV]
        except Exception as exc:
            note(f"substituting tune's policy failed: {type(exc).__name__}: {exc}")
    if os.environ.get(TUNE_FDS_ENV):  # profile-step tune: take the step, compile it for the target
        from profiler.capture import step_catch

        step_catch.install()
        return
    try:
        patch_jax()
    except Exception as exc:
        note(f"hooking JAX failed: {type(exc).__name__}: {exc}")
    write_facts()


def _at_exit() -> None:
    _facts["xla_flags_at_exit"] = os.environ.get("XLA_FLAGS")
    write_facts()


def install() -> None:
    """Called by the hook's ``sitecustomize``; never raises."""
    try:
        if os.environ.get(HOOK_ENV) == "0" or not (os.environ.get(RUN_DIR_ENV) or os.environ.get(TUNE_FDS_ENV)):
            return
        if os.environ.get(TUNE_FDS_ENV):
            from profiler.xla import tune_server

            tune_server.watch_opens()  # tune's launch key: the files the script reads up to its step
        _facts["executable"] = sys.executable
        _facts["xla_flags_at_start"] = os.environ.get("XLA_FLAGS", "")
        import atexit

        atexit.register(_at_exit)  # the last handler to run: it touches nothing but the environment
        if "jax" in sys.modules:
            _after_jax()
        else:
            sys.meta_path.insert(0, _JaxWatch())
    except Exception:
        pass
