"""Run what is being traced: a `module:Attr` model audit, or a user's script "as python would".

Script running follows coverage.py's execfile: ``sys.argv``, ``sys.path[0]``,
a real ``__main__`` module, the program's own exit status, and its traceback
with this tool's frames cut out.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import runpy
import sys
import traceback
import types
import warnings
import zipfile
from dataclasses import dataclass
from typing import Any, Callable

from prov_trace import torchver, voice
from prov_trace.errors import UsageError
from prov_trace.probes import source as source_probe
from prov_trace.signals import Terminated
from prov_trace.tracer import stack


# --- what to run ---------------------------------------------------------------------------

MODEL, SCRIPT, MODULE = "model", "script", "module"


def classify(target: str | None, module_name: str | None) -> str:
    """Whether `target` names a model (``file.py:Attr``, ``module:Attr``), a script, or (with -m) a module."""
    if module_name:
        return MODULE
    if target is None:
        raise UsageError(f"nothing to run: give a model (file.py:Class), a script (file.py), or "
                         f"{voice.given('-m', 'MODULE')}; see {voice.opt('--help')}")
    if ModelTarget.parse(target) is not None and not os.path.isfile(target):
        return MODEL
    if os.path.isdir(target):  # python runs a directory's __main__.py; prov-trace runs source files
        main = os.path.join(target, "__main__.py")
        raise UsageError(f"{target} is a directory: prov-trace runs a script file or -m MODULE"
                         + (f"; give its {main}" if os.path.isfile(main) else ""))
    if os.path.isfile(target) and not target.endswith(".py") and zipfile.is_zipfile(target):
        raise UsageError(f"{target} is a zip archive: prov-trace runs Python source; unpack it and give its __main__.py")
    if target.endswith(".py") or os.path.isfile(target):
        return SCRIPT
    if target.startswith("-"):
        raise UsageError(f"'{target}' is not an option of prov-trace run: see prov-trace run --help")
    raise UsageError(f"'{target}' is neither a model target (file.py:Class or module:Class) nor a Python script")


# --- model targets -------------------------------------------------------------------


@dataclass
class ModelTarget:
    module: str          # module name or path to a .py file
    attr: str

    @classmethod
    def parse(cls, text: str) -> "ModelTarget | None":
        """`file.py:Attr` or `pkg.module:Attr`; None when `text` is not of that shape."""
        if ":" not in text:
            return None
        mod, _, attr = text.rpartition(":")
        if not mod or not attr.replace(".", "").replace("_", "a").isalnum() or attr[0].isdigit():
            return None
        return cls(mod, attr)


def load_module(spec: str) -> types.ModuleType:
    """Import `spec`, a dotted module name (from cwd) or a path to a .py file."""
    if spec.endswith(".py") or os.sep in spec or "/" in spec:
        path = os.path.abspath(spec)
        if not os.path.isfile(path):
            raise UsageError(f"there is no file {spec}: give a path to a .py file or an importable module name")
        name = os.path.splitext(os.path.basename(path))[0]
        directory = os.path.dirname(path)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        mspec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(mspec)
        sys.modules[name] = module
        mspec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.import_module(spec)
    except ModuleNotFoundError as exc:
        if exc.name and spec.startswith(exc.name):
            raise UsageError(
                f"cannot import {spec}: run from the directory that holds it, or give its path (e.g. examples/{spec}.py:...)"
            ) from None
        raise


def build_model(module: types.ModuleType, attr: str) -> Any:
    import torch

    obj: Any = module
    for part in attr.split("."):
        if not hasattr(obj, part):
            raise UsageError(f"{module.__name__} has no attribute {attr}: name an nn.Module class or a function returning one")
        obj = getattr(obj, part)
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        try:
            model = obj()
        except TypeError as exc:
            raise UsageError(f"{attr}() needs arguments ({exc}): give it defaults, or name a zero-argument function that builds it") from None
    elif isinstance(obj, torch.nn.Module):
        model = obj
    elif callable(obj):
        model = obj()
        if not isinstance(model, torch.nn.Module):
            raise UsageError(f"{attr}() returned a {type(model).__name__}, not an nn.Module")
    else:
        kind = type(obj).__name__
        raise UsageError(f"{attr} is {'an' if kind[:1].lower() in 'aeiou' else 'a'} {kind}: name an nn.Module class or "
                         "a function returning one")
    return model


def parse_shape(text: str) -> tuple[int, ...]:
    """``2,128`` or ``2x128`` (a trailing separator is allowed); every size a positive integer."""
    parts = [p.strip() for p in text.replace("x", ",").split(",")]
    if len(parts) > 1 and parts[-1] == "":
        parts.pop()
    try:
        shape = tuple(int(p) for p in parts)
    except ValueError:
        raise UsageError(f"{voice.given('--input-shape', text, quote=True)} is not a shape: write it as "
                         "comma-separated sizes, e.g. 2,128") from None
    if not shape or any(s <= 0 for s in shape):
        raise UsageError(f"{voice.given('--input-shape', text, quote=True)} is not a shape: every size must be a "
                         "positive integer, e.g. 2,128")
    return shape


def example_inputs(model: Any, module: types.ModuleType, shape: str | None, dtype: str, device: str) -> tuple[tuple, str]:
    """Inputs for the model, and where they came from (the order is documented in --help)."""
    import torch

    try:
        tdtype = getattr(torch, dtype)
        assert isinstance(tdtype, torch.dtype)
    except (AttributeError, AssertionError):
        raise UsageError(f"{voice.given('--dtype', dtype)} is not a torch dtype: use e.g. float32, bfloat16, "
                         "float16") from None
    if shape:
        return (torch.randn(parse_shape(shape), dtype=tdtype, device=device),), voice.given("--input-shape", shape)
    fn = getattr(module, "example_inputs", None)
    if callable(fn):
        inputs = fn()
        if not isinstance(inputs, (tuple, list)):
            inputs = (inputs,)
        return tuple(inputs), f"{module.__name__}.example_inputs()"
    for sub in model.modules():
        if isinstance(sub, torch.nn.Linear):
            return (torch.randn(2, sub.in_features, dtype=tdtype, device=device),), f"first layer {type(sub).__name__}(in_features={sub.in_features})"
        if isinstance(sub, torch.nn.Conv2d):
            return (torch.randn(2, sub.in_channels, 32, 32, dtype=tdtype, device=device),), f"first layer Conv2d(in_channels={sub.in_channels}), 32x32"
        if isinstance(sub, torch.nn.Embedding):
            return (torch.randint(0, sub.num_embeddings, (2, 16), device=device),), f"first layer Embedding({sub.num_embeddings}), 2x16 tokens"
        if any(True for _ in sub.parameters(recurse=False)):
            break
    raise UsageError(
        f"cannot infer the model's input: pass {voice.opt('--input-shape')} (e.g. {voice.given('--input-shape', '2,128')}), "
        "or define example_inputs() in the model's file"
    )


def check_arity(model: Any, inputs: tuple, origin: str, module_name: str) -> None:
    """Before compiling: the model's forward must take as many inputs as it is given (UsageError, one sentence)."""
    import inspect

    fn = getattr(model, "forward", None)
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return
    params = [p for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    required = [p for p in params if p.default is p.empty]
    varargs = any(p.kind is p.VAR_POSITIONAL for p in sig.parameters.values())
    n = len(inputs)
    if required and n < len(required) or (not varargs and n > len(params)):
        names = ", ".join(p.name for p in required) or "no inputs"
        want = len(required) if n < len(required) else len(params)
        width = next((w for m in model.modules() if type(w := getattr(m, "in_features", None)) is int), 8)
        example = ", ".join(f"torch.randn(2, {width})" for _ in range(max(want, 1)))
        raise UsageError(
            f"{type(model).__name__}.forward takes {want} input{'s' if want != 1 else ''} ({names}), but {origin} gives "
            f"{n}: define example_inputs() in {module_name} returning a tuple of {want}, e.g. "
            f"`def example_inputs(): return ({example}{',' if want == 1 else ''})`")


def describe(value: Any) -> str:
    """An input as the run's log line shows it: a tensor's shape and dtype, else its type."""
    shape, dtype = getattr(value, "shape", None), getattr(value, "dtype", None)
    if shape is not None and dtype is not None:
        return f"{tuple(shape)} {dtype}"
    return type(value).__name__


def _first_line(exc: BaseException) -> str:
    """An exception as one line: its message's first line, else its type's name."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def check_device(device: str) -> None:
    """UsageError, in one sentence, for a --device torch does not know or cannot use here."""
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError, ValueError) as exc:
        raise UsageError(f"{voice.given('--device', device)} is not a device torch knows ({_first_line(exc)}): "
                         "use e.g. cpu or cuda:0") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"{voice.given('--device', device)}, but this torch sees no CUDA device: leave "
                         f"{voice.opt('--device')} out to run on the cpu")


def to_device(model: Any, device: str) -> Any:
    """`model.to(device)`, a failure said in one sentence (UsageError)."""
    try:
        return model.to(device)
    except (RuntimeError, AssertionError) as exc:
        raise UsageError(f"cannot put the model on {voice.given('--device', device)}: {_first_line(exc)}") from None


def model_device(model: Any, default: str) -> str:
    """The device type the model's parameters (else buffers) live on."""
    for tensors in (model.parameters(), model.buffers()):
        for t in tensors:
            return t.device.type
    return default.split(":")[0]


_UNSET = object()


def defeat_caches() -> Callable[[], None]:
    """A cache hit skips lowering and codegen, so stages 4-7 would never fire. Returns what puts the
    caches back as they were (a trace that ends hands the process back with its caches on).

    Defeating caches makes torch warn, on every run, that it turned its profile-guided
    cache (dynamo_pgo) off as well: that warning is prov-trace's doing, not the program's,
    so it is filtered, and only it.
    """
    env_before = os.environ.get("TORCHINDUCTOR_FORCE_DISABLE_CACHES")
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    warnings.filterwarnings("ignore", message="dynamo_pgo force disabled by torch.compiler.config.force_disable_caches",
                            category=UserWarning)
    config_before: Any = _UNSET
    force_before: Any = _UNSET
    if "torch" in sys.modules:
        import torch

        config_before = torch.compiler.config.force_disable_caches
        torch.compiler.config.force_disable_caches = True
        # torch's config values are per thread (a ContextVar each): the line above holds for this thread
        # only, and a compile on another thread would hit the cache. The environment variable is read
        # when torch is imported, which is over; set what it would have set, for every thread.
        try:
            entry = torch.compiler.config._config["force_disable_caches"]
            force_before = entry.env_value_force
            entry.env_value_force = True
        except (AttributeError, KeyError, TypeError):
            pass

    def restore() -> None:
        if env_before is None:
            os.environ.pop("TORCHINDUCTOR_FORCE_DISABLE_CACHES", None)
        else:
            os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = env_before
        torch = sys.modules.get("torch")
        if torch is None:
            return
        try:
            entry = torch.compiler.config._config["force_disable_caches"]
            if force_before is not _UNSET:
                entry.env_value_force = force_before
            elif env_before is None and not os.environ.get("TORCH_COMPILE_FORCE_DISABLE_CACHES"):
                # torch was imported during the trace and read the variable set above: read it as unset.
                from torch.utils._config_module import _UNSET_SENTINEL

                entry.env_value_force = _UNSET_SENTINEL
            if config_before is not _UNSET:
                torch.compiler.config.force_disable_caches = config_before
        except (AttributeError, KeyError, TypeError, ImportError):
            pass

    return restore


def inputs_misfit(model: Any, inputs: tuple, *, train: bool) -> str | None:
    """After a failed compile: the error, in one line, when the model fails on `inputs` uncompiled too
    (so the inputs do not fit it, the compile is not to blame); None when it runs, or the check can't say."""
    import torch

    try:
        if train:
            model(*inputs)
        else:
            with torch.no_grad():
                model(*inputs)
    except Exception as exc:  # noqa: BLE001 - what the model raises is the answer
        return f"{type(exc).__name__}: {_first_line(exc)}" if str(exc).strip() else type(exc).__name__
    return None


def run_model(model: Any, inputs: tuple, *, train: bool) -> Any:
    """Compile the model once and run it once (plus backward under train); returns the output."""
    import torch

    logging.getLogger("torch.utils.cpp_extension").addFilter(torchver.NoCudaRuntimeNote())
    torch._dynamo.reset()
    compiled = torch.compile(model)
    if train:
        model.train()
        out = compiled(*inputs)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        loss = sum(o.float().sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad)
        if isinstance(loss, torch.Tensor):
            loss.backward()
        return out
    model.eval()
    with torch.no_grad():
        return compiled(*inputs)


# --- scripts ---------------------------------------------------------------------------


@dataclass
class ScriptResult:
    exit_code: int
    outcome: str         # ok | exit | exception | interrupted | signal
    detail: str | None = None


def _exit_code(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _cut_tool_frames(tb: types.TracebackType | None, first_file: str) -> types.TracebackType | None:
    """Drop the traceback entries before the user's program starts."""
    t = tb
    while t is not None:
        if os.path.abspath(t.tb_frame.f_code.co_filename) == first_file or not t.tb_frame.f_code.co_filename.startswith(
            os.path.dirname(os.path.abspath(__file__))
        ):
            return t
        t = t.tb_next
    return tb


def module_file(name: str, *, as_main: bool = False) -> str | None:
    """The file `name` would be imported (or run, with `as_main`) from, found without importing anything."""
    parts = name.split(".")
    if not all(p.isidentifier() for p in parts):
        return None
    for base in [os.getcwd(), *[p or os.getcwd() for p in sys.path if isinstance(p, str)]]:
        stem = os.path.join(base, *parts)
        for candidate in (stem + ".py", *((os.path.join(stem, "__main__.py"),) if as_main else ()),
                          os.path.join(stem, "__init__.py")):
            if os.path.isfile(candidate):
                return os.path.abspath(candidate)
    return None


def input_files(kind: str, target: str | None, module_name: str | None) -> list[tuple[str, str]]:
    """The files a run reads as its program, as (what, absolute path): the script, the model's file, the module."""
    if kind == SCRIPT and target:
        return [("script", os.path.abspath(target))]
    if kind == MODULE and module_name:
        path = module_file(module_name, as_main=True)
        return [("module", path)] if path else []
    if kind == MODEL and target:
        mt = ModelTarget.parse(target)
        if mt is None:
            return []
        if mt.module.endswith(".py") or os.sep in mt.module or "/" in mt.module:
            return [("model file", os.path.abspath(mt.module))]
        path = module_file(mt.module)
        return [("model file", path)] if path else []
    return []


def module_exists(name: str) -> bool:
    """Whether `python -m name` would find something to run (from the current directory)."""
    added = os.getcwd() not in sys.path
    if added:
        sys.path.insert(0, os.getcwd())
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False
    finally:
        if added:
            sys.path.remove(os.getcwd())


def _path0(target: str, as_module: bool) -> str | None:
    """What python puts first on sys.path for this program: None under -P, PYTHONSAFEPATH or -I."""
    if sys.flags.safe_path or sys.flags.isolated:
        return None
    if as_module:
        return os.getcwd()
    return os.path.dirname(os.path.realpath(os.path.abspath(target)))


def _report_uncaught(exc: BaseException, first_file: str) -> None:
    """Report an uncaught exception the way python does: through ``sys.excepthook``.

    The tool's frames are cut from the traceback first (from the exception's own
    ``__traceback__`` too: the default hook prints that one). A hook that itself raises
    gets python's "Error in sys.excepthook" report, then the original exception.
    """
    tb = _cut_tool_frames(exc.__traceback__, first_file)
    exc.__traceback__ = tb
    try:
        sys.excepthook(type(exc), exc, tb)
    except SystemExit:
        raise
    except BaseException as hook_exc:  # noqa: BLE001 - as python reports a failing excepthook
        hook_exc.__suppress_context__ = True
        hook_tb = hook_exc.__traceback__.tb_next if hook_exc.__traceback__ is not None else None
        hook_exc.__traceback__ = hook_tb
        sys.stderr.write("Error in sys.excepthook:\n")
        sys.__excepthook__(type(hook_exc), hook_exc, hook_tb)
        sys.stderr.write("\nOriginal exception was:\n")
        sys.__excepthook__(type(exc), exc, tb)
    finally:
        try:
            sys.stderr.flush()
        except Exception:  # noqa: BLE001
            pass


#: Measures, from a module frame, how many nested calls it can make before RecursionError.
_HEADROOM = compile("def _down(n):\n    try:\n        return _down(n + 1)\n    except RecursionError:\n        return n\n"
                    "headroom = _down(0)\n", "<prov-trace: recursion headroom>", "exec")


def _recursion_lift(as_module: bool) -> int:
    """How many levels of recursion prov-trace's own frames (the command line, click, the API) take from the
    program: what python gives its first frame less what it gets from here. Called from the frame that runs
    the program (a script's exec, or the -m path, two runpy frames below the exec).

    From 3.12 the limit counts Python frames only: the frames below are counted (a script's module frame
    is the first under python; a -m module's has runpy's two below it, as ours does). Before 3.12 it also
    counts C-level entries into the interpreter (an exec, a class's __call__), so the headroom is measured
    where no trace or profile function is set (a RecursionError inside one would switch it off): a module
    frame exec'd from here recurses to the limit, against the L - 2 levels python gives a script's module
    frame (a -m module's: two runpy frames and its exec less). Under a trace function the Python frames are
    counted there too, which misses those few C-level entries.
    """
    frames, f = 0, sys._getframe(1)
    while f is not None:
        frames, f = frames + 1, f.f_back
    if sys.version_info >= (3, 12) or sys.gettrace() is not None or sys.getprofile() is not None:
        return frames
    limit = sys.getrecursionlimit()
    runpy_frames = 2 if as_module else 0  # _run_module_code and _run_code, between this caller and the exec
    ns: dict[str, Any] = {}
    exec(_HEADROOM, ns)
    here = ns["headroom"] + 1 - runpy_frames  # +1: this function's frame, which the program's exec won't have
    python = limit - 2 - (3 if as_module else 0)
    return max(0, python - here)


class _LiftedRecursionLimit:
    """Raise the recursion limit by `lift` while the program runs; put it back unless the program changed it."""

    def __init__(self, lift: int):
        self.lift = lift
        self.limit = sys.getrecursionlimit()

    def __enter__(self) -> None:
        if self.lift:
            sys.setrecursionlimit(self.limit + self.lift)

    def __exit__(self, *exc: Any) -> None:
        if self.lift and sys.getrecursionlimit() == self.limit + self.lift:
            sys.setrecursionlimit(self.limit)


# --- the program's frames where python puts them ----------------------------------------------------
#
# How deep the program starts decides where its calls cross the interpreter's 16 KiB frame-stack chunks,
# and each call across an edge maps and unmaps a chunk (prov_trace/tracer/stack.py): the encoder's compile
# took 234,000 to 539,000 page faults depending only on the frames below its script (docs/benchmarks.md).
# Python runs a script's module frame one slot into the thread's first chunk; here it is exec'd from a
# frame of `stack.OWN_CHUNK` slots, which opens a chunk of its own and leaves the module frame the same
# room to that chunk's end, so every frame the program pushes meets the edges where it would under python.
# A -m module's frame sits after runpy's two frames under python; that trampoline is sized for them too.


def _exec_as_python(code: types.CodeType, globals_: dict[str, Any]) -> None:
    """``exec(code, globals_)`` with the module frame's room in its chunk what python gives a script's."""
    with _LiftedRecursionLimit(_recursion_lift(as_module=False)):
        exec(code, globals_)


if stack.FRAME_SPECIALS is not None:  # elsewhere the layout is not known: exec'd from where it is
    stack.sized(_exec_as_python, stack.OWN_CHUNK)


def _run_module_as_python(run_code: Callable[..., Any], code: types.CodeType, spec: Any) -> None:
    """``run_code(code, None, "__main__", spec)`` (runpy's ``_run_module_code``, whose ``_run_code`` execs the
    module), with the module frame's room in its chunk what ``python -m`` gives it: python's module frame
    sits after runpy's ``_run_module_as_main`` and ``_run_code``."""
    with _LiftedRecursionLimit(_recursion_lift(as_module=True)):
        run_code(code, None, "__main__", spec)


if stack.FRAME_SPECIALS is not None and hasattr(runpy, "_run_module_as_main") and hasattr(runpy, "_run_module_code"):
    stack.sized(_run_module_as_python, stack.OWN_CHUNK + stack.frame_slots(runpy._run_module_as_main.__code__)
                - stack.frame_slots(runpy._run_module_code.__code__))


def _run_module_as_main(name: str, on_main: Callable[[types.ModuleType | None, types.CodeType], None] | None) -> None:
    """``runpy.run_module(name, run_name="__main__", alter_sys=True)``, with `on_main` told the code it runs.

    runpy reads the module's code and runs it in one call; its two steps (kept since Python 3.4) are
    used where they exist, so the code object announced is the one that runs.
    """
    details = getattr(runpy, "_get_module_details", None)
    run_code = getattr(runpy, "_run_module_code", None)
    if details is None or run_code is None:
        runpy.run_module(name, run_name="__main__", alter_sys=True)
        return
    mod_name, spec, code = details(name)
    origin = getattr(spec, "origin", None)
    known = isinstance(origin, str) and _remember_program(origin)
    try:
        if on_main is not None:
            on_main(None, code)
        _run_module_as_python(run_code, code, spec)
    finally:
        if known:
            source_probe.forget_program(origin)


def _remember_program(path: str, source: bytes | None = None) -> bool:
    """Keep the program's source text for the source stage, read once now (the program may delete its file)."""
    try:
        if source is None:
            with open(path, "rb") as f:
                source = f.read()
        source_probe.remember_program(path, importlib.util.decode_source(source))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return False
    return True


def run_program(target: str, args: list[str], *, as_module: bool,
                on_main: Callable[[types.ModuleType | None, types.CodeType], None] | None = None) -> ScriptResult:
    """Run a script or `-m` module the way python would; return how it ended. Never raises for the program.

    As python does (and coverage.py's execfile): ``sys.argv`` is the program's; ``sys.path[0]``
    (which python set for prov-trace itself) is replaced by the script's directory, or the current
    directory for a module, and left alone under ``-P``/``PYTHONSAFEPATH``/``-I``; an uncaught
    exception goes through ``sys.excepthook``; the working directory is what the program left; the
    recursion depth left to it is what python gives it.

    `on_main(module, code)` is called just before the program's code runs as ``__main__`` (the module is
    None for ``-m``, where runpy makes it), so a tracer can watch the functions that code defines.
    """
    old_argv = list(sys.argv)
    old_path0 = sys.path[0] if sys.path else None
    path0 = _path0(target, as_module)
    main_mod = sys.modules.get("__main__")
    try:
        if as_module:
            sys.argv = [target, *args]
            if path0 is not None:
                _set_path0(path0)
            first_file = ""
            try:
                spec = importlib.util.find_spec(target)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                raise UsageError(f"no module named {target}: check the name, or run from the directory that holds it")
            runner = lambda: _run_module_as_main(target, on_main)  # noqa: E731
        else:
            path = script_path(target)
            if not os.path.isfile(path):
                raise UsageError(f"there is no file {target}: give the path to a Python script")
            first_file = path
            sys.argv = [target, *args]
            if path0 is not None:
                _set_path0(path0)
            with open(path, "rb") as f:
                source = f.read()
            try:
                code = compile(source, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                # python prints a script's syntax error with no traceback: the only frame here is prov-trace's.
                exc.__traceback__ = None
                _report_uncaught(exc, first_file)
                return ScriptResult(1, "exception", f"SyntaxError: {exc}")
            known = _remember_program(path, source)
            module = main_module(path)
            sys.modules["__main__"] = module

            def runner() -> None:
                try:
                    if on_main is not None:
                        on_main(module, code)
                    _exec_as_python(code, module.__dict__)
                finally:
                    if known:
                        source_probe.forget_program(path)

        try:
            try:
                runner()
            except (SystemExit, Terminated):
                raise
            except KeyboardInterrupt as exc:
                _report_uncaught(exc, first_file)
                return ScriptResult(130, "interrupted", "KeyboardInterrupt")
            except BaseException as exc:  # noqa: BLE001 - the program's own exception, reported as python would
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip()
                _report_uncaught(exc, first_file)
                return ScriptResult(1, "exception", detail)
        except SystemExit as exc:  # from the program, or from its excepthook
            code_ = _exit_code(exc.code)
            return ScriptResult(code_, "exit", f"SystemExit({exc.code!r})")
        except Terminated as exc:  # prov-trace's SIGTERM handler: stop cleanly, no traceback (python prints none)
            return ScriptResult(exc.exit_code, "signal", exc.name)
        return ScriptResult(0, "ok")
    finally:
        sys.argv = old_argv
        if path0 is not None and old_path0 is not None and sys.path and sys.path[0] == path0:
            sys.path[0] = old_path0
        if main_mod is not None:
            sys.modules["__main__"] = main_mod


def script_path(target: str) -> str:
    """The script's ``__file__`` as python gives it: absolute, joined to the working directory as written
    (``..`` and symlinks kept, not resolved)."""
    return target if os.path.isabs(target) else os.path.join(os.getcwd(), target)


def main_module(path: str) -> types.ModuleType:
    """A ``__main__`` for the script at `path` with the globals python gives one: ``__builtins__`` the
    module, a ``SourceFileLoader``, ``__cached__`` None, an empty ``__annotations__`` (before 3.14)."""
    import builtins
    from importlib.machinery import SourceFileLoader

    module = types.ModuleType("__main__")
    module.__loader__ = SourceFileLoader("__main__", path)  # type: ignore[assignment]
    module.__spec__ = None
    if sys.version_info < (3, 14):
        module.__annotations__ = {}
    module.__builtins__ = builtins  # type: ignore[attr-defined]
    module.__file__ = path
    module.__cached__ = None  # type: ignore[attr-defined]
    return module


def _set_path0(path0: str) -> None:
    """Put the program's directory where python puts it: in place of sys.path[0], not before it."""
    if sys.path:
        sys.path[0] = path0
    else:
        sys.path.insert(0, path0)
