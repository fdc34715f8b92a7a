"""Run what is being traced: a `module:Attr` model audit, or a user's script "as python would".

Script running follows coverage.py's execfile: ``sys.argv``, ``sys.path[0]``,
a real ``__main__`` module, the program's own exit status, and its traceback
with this tool's frames cut out.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import runpy
import sys
import traceback
import types
from dataclasses import dataclass
from typing import Any, Callable


class UsageError(Exception):
    """Bad input from the user: one sentence saying what to do. Exit status 2."""


class Terminated(BaseException):
    """Raised in the main thread by prov-trace's SIGTERM handler: unwinds the traced program like Ctrl-C does.

    A BaseException, so the program's ``except Exception`` does not swallow it.
    """

    def __init__(self, signum: int):
        import signal

        self.signum = signum
        try:
            self.name = signal.Signals(signum).name
        except ValueError:
            self.name = f"signal {signum}"
        super().__init__(self.name)

    @property
    def exit_code(self) -> int:
        """What a shell reports for a process the signal ended: 128 + the signal number."""
        return 128 + self.signum


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
        raise UsageError(f"{attr} is a {type(obj).__name__}: name an nn.Module class or a function returning one")
    return model


def parse_shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(p) for p in text.replace("x", ",").split(",") if p.strip())
    except ValueError:
        raise UsageError(f"--input-shape '{text}' is not a shape: write it as comma-separated sizes, e.g. 2,128") from None
    if not shape or any(s <= 0 for s in shape):
        raise UsageError(f"--input-shape '{text}' is not a shape: every size must be a positive integer, e.g. 2,128")
    return shape


def example_inputs(model: Any, module: types.ModuleType, shape: str | None, dtype: str, device: str) -> tuple[tuple, str]:
    """Inputs for the model, and where they came from (the order is documented in --help)."""
    import torch

    try:
        tdtype = getattr(torch, dtype)
        assert isinstance(tdtype, torch.dtype)
    except (AttributeError, AssertionError):
        raise UsageError(f"--dtype {dtype} is not a torch dtype: use e.g. float32, bfloat16, float16") from None
    if shape:
        return (torch.randn(parse_shape(shape), dtype=tdtype, device=device),), f"--input-shape {shape}"
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
        "cannot infer the model's input: pass --input-shape (e.g. --input-shape 2,128), "
        "or define example_inputs() in the model's file"
    )


def defeat_caches() -> None:
    """A cache hit skips lowering and codegen, so stages 4-7 would never fire."""
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"
    if "torch" in sys.modules:
        import torch

        torch.compiler.config.force_disable_caches = True
        # torch's config values are per thread (a ContextVar each): the line above holds for this thread
        # only, and a compile on another thread would hit the cache. The environment variable is read
        # when torch is imported, which is over; set what it would have set, for every thread.
        try:
            torch.compiler.config._config["force_disable_caches"].env_value_force = True
        except (AttributeError, KeyError, TypeError):
            pass


def run_model(model: Any, inputs: tuple, *, train: bool) -> Any:
    """Compile the model once and run it once (plus backward under train); returns the output."""
    import torch

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


def run_program(target: str, args: list[str], *, as_module: bool) -> ScriptResult:
    """Run a script or `-m` module the way python would; return how it ended. Never raises for the program."""
    old_argv, old_path0 = list(sys.argv), (sys.path[0] if sys.path else None)
    main_mod = sys.modules.get("__main__")
    try:
        if as_module:
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            first_file = ""
            try:
                spec = importlib.util.find_spec(target)
            except (ImportError, ValueError):
                spec = None
            if spec is None:
                raise UsageError(f"no module named {target}: check the name, or run from the directory that holds it")
            runner = lambda: runpy.run_module(target, run_name="__main__", alter_sys=True)  # noqa: E731
        else:
            path = os.path.abspath(target)
            if not os.path.isfile(path):
                raise UsageError(f"there is no file {target}: give the path to a Python script")
            first_file = path
            sys.argv = [target, *args]
            sys.path.insert(0, os.path.dirname(path))
            with open(path, "rb") as f:
                source = f.read()
            try:
                code = compile(source, path, "exec", dont_inherit=True)
            except SyntaxError as exc:
                traceback.print_exception(type(exc), exc, None)
                return ScriptResult(1, "exception", f"SyntaxError: {exc}")
            module = types.ModuleType("__main__")
            module.__file__ = path
            module.__builtins__ = __builtins__  # type: ignore[attr-defined]
            module.__loader__ = None  # type: ignore[assignment]
            module.__spec__ = None
            sys.modules["__main__"] = module

            def runner() -> None:
                exec(code, module.__dict__)

        try:
            runner()
        except SystemExit as exc:
            code_ = _exit_code(exc.code)
            return ScriptResult(code_, "exit", f"SystemExit({exc.code!r})")
        except Terminated as exc:  # prov-trace's SIGTERM handler: stop cleanly, no traceback (python prints none)
            return ScriptResult(exc.exit_code, "signal", exc.name)
        except KeyboardInterrupt as exc:
            traceback.print_exception(type(exc), exc, _cut_tool_frames(exc.__traceback__, first_file))
            return ScriptResult(130, "interrupted", "KeyboardInterrupt")
        except BaseException as exc:  # noqa: BLE001 - the program's own exception, reported as python would
            traceback.print_exception(type(exc), exc, _cut_tool_frames(exc.__traceback__, first_file))
            return ScriptResult(1, "exception", "".join(traceback.format_exception_only(type(exc), exc)).strip())
        return ScriptResult(0, "ok")
    finally:
        sys.argv = old_argv
        if old_path0 is not None and sys.path and sys.path[0] != old_path0:
            try:
                sys.path.remove(sys.path[0])
            except ValueError:
                pass
        if main_mod is not None:
            sys.modules["__main__"] = main_mod
