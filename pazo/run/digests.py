"""Stable digests of the objects a computation is made of: tensors, a module's structure and
values, a callable's code and the values it closes over.

A run (`pazo.run.build`) and the library entry (`pazo.private`) key their secret streams (noise,
Poisson batches) with them (`key_secret_streams`), so that two loops differ in their noise whenever
they differ in what decides a released value: the initial weights, the public data, the loss. A
digest is the same in any process of one Python and torch for the same object (no `id`, no
`hash()` of a string, no set's order), and differs when a value it covers differs. What cannot be
hashed so (an object of an unknown class in a loss's closure) is named in `CallableDigest.unhashed`,
for the caller to mix in fresh entropy instead.

A user's function is followed into the module-level globals its code reads by name (`LOAD_GLOBAL`,
in nested code too) and, on the classes of the objects being hashed (a model's submodules, a loss
module), into the methods and class attributes its code names: a loss or a forward that reads a
global scale draws other noise when the scale differs. Config objects are hashed by their values: a
dataclass instance by its fields, an OmegaConf config by its resolved container. A user's module
(`import config` of a file of one's own) is followed into the attributes the user's code names
(`config.SCALE`); a module of the library by its name and version. The library's code (the
standard library, installed packages, pazo) is hashed by its code alone: its globals are that
library's state.
"""
from __future__ import annotations

import dataclasses
import dis
import enum
import functools
import hashlib
import importlib.metadata
import importlib.util
import inspect
import platform
import site
import sys
import sysconfig
import types
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from torch import nn

from pazo.rng import RandomStreams

#: values hashed by their type and repr (a repr that is the same in every process)
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, type(Ellipsis))
#: values hashed by their qualified name: the library's code, not the user's
_NAMED = (types.BuiltinFunctionType, types.MethodWrapperType, types.WrapperDescriptorType,
          types.MethodDescriptorType, types.ClassMethodDescriptorType, type, np.ufunc)
#: the flags that say what kind of code it is (generator, varargs, ...); the ones above are `__future__`
#: imports of the defining module, which change no value computed
_CODE_KIND_FLAGS = 0xFFFF
#: how deep a callable's values are followed (closures of closures ...) before a part counts as unhashed
MAX_DEPTH = 24
#: how many objects one digest walks (globals of globals, their items ...) before the rest counts as unhashed
MAX_OBJECTS = 100_000
#: what every nn.Module holds (parameters, buffers and submodules are hashed as the state and structure)
_MODULE_INTERNALS = frozenset(vars(nn.Module()))
#: what every Python module holds (its loader, spec, file ...): not values the user's code reads
_PYTHON_MODULE_INTERNALS = frozenset(vars(types.ModuleType("m"))) | {"__file__", "__cached__", "__builtins__",
                                                                      "__path__"}
#: the opcodes that read a module-level global by name
_GLOBAL_LOADS = frozenset({"LOAD_GLOBAL", "LOAD_NAME", "LOAD_FROM_DICT_OR_GLOBALS"})
#: where a module without a file comes from when it is Python's own
_BUILT_IN_ORIGINS = frozenset({"built-in", "frozen"})


def update_with_tensors(digest, tensors) -> None:
    """Feed each tensor's shape, dtype and bytes to `digest` (a hashlib object), one host copy at a time."""
    for tensor in tensors:
        tensor = tensor.detach()
        if tensor.layout != torch.strided:   # (a sparse tensor: its values as a dense one)
            tensor = tensor.to_dense()
        digest.update(repr((tuple(tensor.shape), str(tensor.dtype))).encode())
        if tensor.numel():   # (an empty tensor has no bytes, and torch cannot view it as bytes)
            digest.update(tensor.cpu().contiguous().reshape(-1).view(torch.uint8).numpy())


def tensors_digest(*tensors: torch.Tensor) -> str:
    """The hex sha256 of tensors' shapes, dtypes and values."""
    digest = hashlib.sha256()
    update_with_tensors(digest, tensors)
    return digest.hexdigest()


def module_digest(module: nn.Module) -> CallableDigest:
    """The digest of a module's structure (each submodule's name, class, forward code and
    `extra_repr`; a user class's forward with the globals, methods and class and instance
    attributes it reads; the user's modules' attributes it names) and of the values of all its
    parameters and buffers (frozen ones included)."""
    hasher = _Hasher("model")
    for sub in module.modules():   # (every class first: a forward may call a submodule's method)
        hasher.own(type(sub))
    for name, sub in module.named_modules():
        cls = type(sub)
        hasher.tag(name, cls.__module__, cls.__qualname__, sub.extra_repr())
        forward = getattr(cls, "forward", None)
        if isinstance(forward, types.FunctionType) and not is_library_code(forward):
            hasher.add(forward, f"model's {cls.__qualname__}.forward", 0)
        else:
            hasher.tag(_forward_code_digest(cls))
    hasher.follow_names(module)
    update_with_state(hasher.digest, module)
    return CallableDigest(hasher.digest.hexdigest(), hasher.unhashed)


def state_digest(module: nn.Module) -> str:
    """The hex sha256 of a module's values alone: each parameter's and buffer's name, shape, dtype
    and bytes (frozen ones included), in the module's order. Unlike `module_digest`, no code: the
    same in any Python version for the same weights (a framework run's config names the structure)."""
    digest = hashlib.sha256()
    update_with_state(digest, module)
    return digest.hexdigest()


def update_with_state(digest, module: nn.Module) -> None:
    """Feed each named parameter and buffer of `module` (name, then tensor) to `digest`."""
    for kind, named in (("parameter", module.named_parameters()), ("buffer", module.named_buffers())):
        for name, tensor in named:
            digest.update(f"{kind} {name}".encode())
            update_with_tensors(digest, [tensor])


@functools.lru_cache(maxsize=1024)
def _forward_code_digest(cls: type) -> str:
    """The digest of a library module class's forward code (its bytecode, constants and names)."""
    forward = getattr(cls, "forward", None)
    code = getattr(forward, "__code__", None)
    return callable_digest(code).hex if code is not None else f"{cls.__module__}.{cls.__qualname__}.forward"


@functools.cache
def _library_roots() -> tuple[Path, ...]:
    """Where the library's code lives: the standard library, installed packages and pazo."""
    paths = sysconfig.get_paths()
    roots = [paths[kind] for kind in ("stdlib", "platstdlib", "purelib", "platlib")] + [site.getusersitepackages()]
    return tuple(Path(root).resolve() for root in roots) + (Path(__file__).resolve().parents[1],)


@functools.lru_cache(maxsize=4096)
def _is_library_file(file: str) -> bool:
    path = Path(file).resolve()
    return any(path.is_relative_to(root) for root in _library_roots())


def is_library_code(fn: types.FunctionType) -> bool:
    """Whether a function is the library's (its module's file in the standard library, an installed
    package or pazo), not the user's (a script, a notebook, the user's own modules)."""
    file = fn.__globals__.get("__file__")
    return isinstance(file, str) and _is_library_file(file)


def is_library_module(module: types.ModuleType) -> bool:
    """Whether a module is the library's: from files of the standard library, an installed package or
    pazo (a namespace package: all its folders there); one without such a file (an extension's
    submodule, `torch.ops`) by its top-level package; else built into Python or frozen. A module made
    in code or a notebook's `__main__` is the user's."""
    held = vars(module)   # (not getattr: a module's `__getattr__` may make up any name, as torch.classes does)
    file = held.get("__file__")
    if isinstance(file, str) and Path(file).is_absolute():
        return _is_library_file(file)
    path = held.get("__path__")
    folders = [folder for folder in path if isinstance(folder, str)] if isinstance(path, Iterable) else []
    if folders:
        return all(_is_library_file(folder) for folder in folders)
    top = sys.modules.get(str(module.__name__).partition(".")[0])
    if isinstance(top, types.ModuleType) and top is not module:
        return is_library_module(top)
    origin = getattr(held.get("__spec__"), "origin", None)
    return module.__name__ in sys.builtin_module_names or origin in _BUILT_IN_ORIGINS


@functools.lru_cache(maxsize=1024)
def library_version(name: str) -> str:
    """The version of what holds the library's module `name`: Python's for the standard library,
    else its package's `__version__` or its installed distributions' versions."""
    top = name.partition(".")[0]
    if top in sys.stdlib_module_names or top in sys.builtin_module_names:
        return f"python {platform.python_version()}"
    version = getattr(sys.modules.get(top), "__version__", None)
    if isinstance(version, str):
        return str(version)
    distributions = sorted(set(_distributions().get(top, ())))
    return ", ".join(f"{dist} {importlib.metadata.version(dist)}" for dist in distributions) or "no version"


@functools.cache
def _distributions() -> dict[str, list[str]]:
    """Each importable top-level name's installed distributions (read once: it scans them all)."""
    return importlib.metadata.packages_distributions()


@functools.lru_cache(maxsize=4096)
def _names_read(code: types.CodeType) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(the globals read by name, every name used) in `code` and the code nested in it, sorted."""
    globals_read = {ins.argval for ins in dis.get_instructions(code) if ins.opname in _GLOBAL_LOADS}
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            nested_globals, nested_names = _names_read(const)
            globals_read.update(nested_globals)
            names.update(nested_names)
    return tuple(sorted(globals_read)), tuple(sorted(names))


@functools.lru_cache(maxsize=4096)
def _imports(code: types.CodeType) -> tuple[tuple[int, str], ...]:
    """(level, name) of each `import` statement in `code` and the code nested in it, sorted."""
    instructions = list(dis.get_instructions(code))
    found = {(_import_level(instructions, i), ins.argval) for i, ins in enumerate(instructions)
             if ins.opname == "IMPORT_NAME"}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            found.update(_imports(const))
    return tuple(sorted(found))


def _import_level(instructions: list, index: int) -> int:
    """The level of the import at `index` (0 absolute; 1 for `from . import`): the constant loaded
    two instructions before IMPORT_NAME (level, then the names imported)."""
    level = instructions[index - 2] if index >= 2 else None
    return level.argval if level is not None and level.opname == "LOAD_CONST" and isinstance(level.argval, int) else 0


def _imported_modules(level: int, name: str, package) -> tuple[str, list[types.ModuleType]]:
    """The absolute name an import names, and the loaded modules it binds or reads from (the
    package first, then the module named): none where it is not loaded yet."""
    try:
        absolute = importlib.util.resolve_name("." * level + name, package) if level else name
    except (ImportError, ValueError):   # (a relative import outside a package: it fails when run)
        return name, []
    names = [absolute.partition(".")[0], absolute] if absolute else []
    return absolute, [sys.modules[each] for each in dict.fromkeys(names) if each in sys.modules]


def is_library_name(name: str) -> bool:
    """Whether a module not loaded yet would come from the library (found without importing
    anything: by its top-level package's location)."""
    top = name.partition(".")[0]
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return True
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return False
    places = [spec.origin] if spec is not None and isinstance(spec.origin, str) else []
    places += list(spec.submodule_search_locations or ()) if spec is not None else []
    return bool(places) and all(place in _BUILT_IN_ORIGINS or _is_library_file(place) for place in places)


def _class_member(owner: type, name: str):
    """What `owner.name` finds statically in the user's classes of its MRO (a function for a
    method), or None where it is not there or is the library's (nn.Module's own, object's)."""
    for klass in owner.__mro__:
        if name in vars(klass):
            member = inspect.getattr_static(klass, name)
            if isinstance(member, (staticmethod, classmethod)):
                member = member.__func__
            elif isinstance(member, property):
                member = member.fget
            library = isinstance(member, types.FunctionType) and is_library_code(member)
            return None if library or _is_library_class(klass) else member
    return None


@functools.lru_cache(maxsize=1024)
def _is_library_class(klass: type) -> bool:
    """Whether a class is the library's (by its functions' module, else by its own)."""
    if klass.__module__ == "builtins":
        return True
    functions = [member for member in vars(klass).values() if isinstance(member, types.FunctionType)]
    if functions:
        return is_library_code(functions[0])
    file = getattr(sys.modules.get(klass.__module__), "__file__", None)
    return isinstance(file, str) and _is_library_file(file)


def _is_omegaconf(value) -> bool:
    """Whether `value` is an OmegaConf config (looked up only where omegaconf is already loaded)."""
    omegaconf = sys.modules.get("omegaconf")
    return omegaconf is not None and isinstance(value, omegaconf.Container)


@dataclass
class CallableDigest:
    """The hex sha256 of a callable and what it holds, and the parts that could not be hashed
    deterministically (empty: the digest is the same for the same callable in any process)."""

    hex: str
    unhashed: list[str] = field(default_factory=list)


def callable_digest(fn, what: str = "the callable") -> CallableDigest:
    """A function's (or lambda's, partial's, bound method's, module's, callable object's) digest:
    its qualified name, its code (bytecode, constants, names; nested code too), and the values of
    its closure cells, defaults and attributes where they are tensors, arrays, numbers, strings,
    containers of them, or callables hashed the same way; a user's function also the module-level
    globals it reads, by the same rule. Anything else is listed as unhashed."""
    hasher = _Hasher(what)
    hasher.add(fn, what, 0)
    hasher.follow_names()
    return CallableDigest(hasher.digest.hexdigest(), hasher.unhashed)


class _Hasher:
    """One walk over a callable's parts, in a fixed order, into one sha256. `owners`: the user's
    classes whose methods and class attributes a user's function may name (`self.helper()`)."""

    def __init__(self, what: str):
        self.what = what
        self.digest = hashlib.sha256()
        self.unhashed: list[str] = []
        self.owners: list[type] = []
        self.names_used: set[str] = set()   # every name the user's code walked uses (attributes among them)
        self._open: list[int] = []   # ids of the objects being walked now (a cycle is hashed as a back reference)
        self._functions: dict[int, tuple[int, types.FunctionType]] = {}   # id: (order, function) of those walked
        self._members: set[tuple[int, str]] = set()   # (id of owner, name) of the class members walked
        self._objects = 0   # (values walked, a set's members among them: past MAX_OBJECTS the rest is unhashed)
        self._bound_named = False
        self._user_modules: list[types.ModuleType] = []   # the user's modules met, in order (followed by name)

    def tag(self, *parts) -> None:
        self.digest.update(repr(parts).encode())

    def follow_names(self, model: nn.Module | None = None) -> None:
        """Hash the attributes the user's code names (`config.SCALE`, `self.temperature`) of the
        user's modules met and of `model`'s own submodules, until the values walked name no more
        (an attribute holding a function names others)."""
        done: set[tuple[str, str]] = set()
        while todo := [item for item in self._attributes_named(model) if item[:2] not in done]:
            for owner, attribute, value, where in todo:
                done.add((owner, attribute))
                self.tag("attribute", owner, attribute)
                self.add(value, where, 0)

    def _attributes_named(self, model: nn.Module | None):
        """(owner, attribute, value, where) for each attribute the code walked names, in a fixed order."""
        named = []
        for module in self._user_modules:
            for attribute in sorted(set(vars(module)) & self.names_used - _PYTHON_MODULE_INTERNALS):
                named.append((f"module {module.__name__}", attribute, vars(module)[attribute],
                              f"{self.what}'s {module.__name__}.{attribute}"))
        for name, sub in model.named_modules() if model is not None else ():
            if not _is_library_class(type(sub)):
                for attribute in sorted(set(vars(sub)) & self.names_used - _MODULE_INTERNALS):
                    named.append((f"submodule {name}", attribute, vars(sub)[attribute],
                                  f"model's {type(sub).__qualname__}.{attribute}"))
        return named

    def add(self, value, where: str, depth: int) -> None:
        self._objects += 1
        if self._objects > MAX_OBJECTS:
            return self._past_the_bound(value, where)
        if isinstance(value, _PLAIN):
            return self.tag(type(value).__name__, repr(value))
        if id(value) in self._open:
            return self.tag("cycle", self._open.index(id(value)))
        if id(value) in self._functions:   # (a function met again: a back reference, so each is walked once)
            return self.tag("function again", self._functions[id(value)][0])
        if depth > MAX_DEPTH:
            return self._unhashed(value, where, "nested too deep")
        self._open.append(id(value))
        try:
            self._add_object(value, where, depth + 1)
        finally:
            self._open.pop()

    def _add_object(self, value, where: str, depth: int) -> None:
        for kinds, add in self._handlers():
            if isinstance(value, kinds):
                return add(value, where, depth)
        if _is_omegaconf(value):
            return self._omegaconf(value, where, depth)
        if dataclasses.is_dataclass(value):   # (an instance: a dataclass itself is a class, named)
            return self._dataclass(value, where, depth)
        if callable(value) and hasattr(value, "__dict__"):
            return self._callable_object(value, where, depth)
        self._unhashed(value, where, "an object pazo cannot hash deterministically")

    def _handlers(self):
        return ((torch.Tensor, self._tensor), (np.ndarray, self._array), ((tuple, list), self._sequence),
                (dict, self._mapping), ((set, frozenset), self._set), (types.CodeType, self._code),
                (types.FunctionType, self._function), (types.MethodType, self._bound),
                (functools.partial, self._partial), (nn.Module, self._module), (slice, self._slice),
                (types.ModuleType, self._python_module), (enum.Enum, self._enum), (_NAMED, self._named),
                ((np.generic,), self._numpy_scalar))

    def _unhashed(self, value, where: str, why: str) -> None:
        self.unhashed.append(f"{where} ({type(value).__name__}: {why})")
        self.tag("unhashed", where)

    def _past_the_bound(self, value, where: str) -> None:
        """The first value past `MAX_OBJECTS` is named (and the rest with it); the others only tagged."""
        if not self._bound_named:
            self._bound_named = True
            self._unhashed(value, where, f"more than {MAX_OBJECTS} objects to hash: it and the rest not hashed")
        else:
            self.tag("unhashed")

    def _tensor(self, value: torch.Tensor, where: str, depth: int) -> None:
        if value.is_meta:
            return self._unhashed(value, where, "a tensor on the meta device, without values")
        self.tag("tensor")
        update_with_tensors(self.digest, [value])

    def _array(self, value: np.ndarray, where: str, depth: int) -> None:
        if value.dtype.hasobject:
            return self._unhashed(value, where, "an array of Python objects")
        self.tag("ndarray", value.shape, str(value.dtype))
        self.digest.update(np.ascontiguousarray(value).tobytes())

    def _numpy_scalar(self, value, where: str, depth: int) -> None:
        self._array(np.asarray(value), where, depth)

    def _sequence(self, value, where: str, depth: int) -> None:
        self.tag(type(value).__name__, len(value))
        for i, item in enumerate(value):
            self.add(item, f"{where}[{i}]", depth)

    def _mapping(self, value: dict, where: str, depth: int) -> None:
        """In sorted key order where the keys are strings, else in the dict's own (insertion) order."""
        keys = sorted(value) if all(isinstance(k, str) for k in value) else list(value)
        self.tag("dict", len(value))
        for key in keys:
            self.add(key, f"{where} key", depth)
            self.add(value[key], f"{where}[{key!r}]", depth)

    def _set(self, value, where: str, depth: int) -> None:
        """By its members' own digests, sorted (a set's order varies between processes)."""
        self._objects += len(value)
        if self._objects > MAX_OBJECTS:
            return self._past_the_bound(value, where)
        members = sorted((callable_digest(item, f"{where} member") for item in value), key=lambda m: m.hex)
        self.tag(type(value).__name__, [m.hex for m in members])
        self.unhashed.extend(u for m in members for u in m.unhashed)

    def _code(self, code: types.CodeType, where: str, depth: int) -> None:
        self.tag("code", getattr(code, "co_qualname", code.co_name), code.co_names, code.co_varnames,
                 code.co_freevars, code.co_argcount, code.co_kwonlyargcount, code.co_flags & _CODE_KIND_FLAGS)
        self.digest.update(code.co_code)
        self.add(code.co_consts, f"{where} constants", depth)

    def _function(self, fn: types.FunctionType, where: str, depth: int) -> None:
        """Its name, code, defaults and closure; a user's function also the globals it reads and
        the members of the owner classes it names."""
        self._functions[id(fn)] = (len(self._functions), fn)
        self.tag("function", fn.__module__, fn.__qualname__)
        self._function_values(fn, where, depth)
        if not is_library_code(fn):
            self._globals_read(fn, where, depth)
            self._imports_read(fn, where, depth)
            self._members_named(fn, depth)

    def _function_values(self, fn: types.FunctionType, where: str, depth: int) -> None:
        self.add(fn.__code__, f"{where} code", depth)
        self.add(fn.__defaults__, f"{where} defaults", depth)
        self.add(fn.__kwdefaults__, f"{where} keyword defaults", depth)
        cells = fn.__closure__ or ()
        for name, cell in zip(fn.__code__.co_freevars, cells):
            try:
                contents = cell.cell_contents
            except ValueError:   # an empty cell (a name the function assigns later)
                self.tag("empty cell", name)
                continue
            self.add(contents, f"{where}'s closure cell {name!r}", depth)

    def _globals_read(self, fn: types.FunctionType, where: str, depth: int) -> None:
        """Each module-level global the code reads by name (a builtin or a name not yet bound: its absence)."""
        for name in _names_read(fn.__code__)[0]:
            if name in fn.__globals__:
                self.tag("global", name)
                self.add(fn.__globals__[name], f"{where}'s global {name!r}", depth)
            else:
                self.tag("no global", name)

    def _imports_read(self, fn: types.FunctionType, where: str, depth: int) -> None:
        """Each module the code imports when it runs (`import config` in a loss), as a global: the one
        loaded now. A module of the user's not loaded yet is read only when the code runs: unhashed."""
        for level, name in _imports(fn.__code__):
            absolute, modules = _imported_modules(level, name, fn.__globals__.get("__package__"))
            self.tag("import", level, absolute)
            for module in modules:
                self.add(module, f"{where}'s import of {module.__name__}", depth)
            if not modules and not is_library_name(absolute):
                self.unhashed.append(f"{where}'s import of {absolute} (a module not loaded yet: its values are "
                                     "read only when the code runs)")

    def _members_named(self, fn: types.FunctionType, depth: int) -> None:
        """The owner classes' methods and class attributes whose names the code uses, each once."""
        names = _names_read(fn.__code__)[1]
        self.names_used.update(names)
        for name in names:
            for owner in self.owners:
                if (id(owner), name) in self._members or (member := _class_member(owner, name)) is None:
                    continue
                self._members.add((id(owner), name))
                self.tag("member", owner.__module__, owner.__qualname__, name)
                self.add(member, f"{self.what}'s {owner.__qualname__}.{name}", depth)

    def own(self, cls: type) -> None:
        """Make a user's class an owner: the functions walked after may name its members."""
        if cls not in self.owners and not _is_library_class(cls):
            self.owners.append(cls)

    def _bound(self, method: types.MethodType, where: str, depth: int) -> None:
        self.tag("bound method")
        self.own(type(method.__self__))
        self.add(method.__func__, where, depth)
        self.add(method.__self__, f"{where}'s object", depth)

    def _partial(self, part: functools.partial, where: str, depth: int) -> None:
        self.tag("partial")
        self.add(part.func, f"{where}'s function", depth)
        self.add(part.args, f"{where}'s arguments", depth)
        self.add(part.keywords, f"{where}'s keywords", depth)

    def _module(self, module: nn.Module, where: str, depth: int) -> None:
        """Its class, its forward (code and what it closes over) and its attributes (settings,
        parameters, buffers, submodules, hooks)."""
        cls = type(module)
        self.own(cls)
        self.tag("module", cls.__module__, cls.__qualname__)
        self.add(getattr(cls, "forward", None), f"{where}'s forward", depth)
        self.add(vars(module), f"{where}'s attributes", depth)

    def _slice(self, value: slice, where: str, depth: int) -> None:
        self.add((value.start, value.stop, value.step), where, depth)

    def _python_module(self, module: types.ModuleType, where: str, depth: int) -> None:
        """The library's module by its name and version (its state is that library's); the user's by
        its name, and the attributes the user's code names (`follow_names`)."""
        if is_library_module(module):
            return self.tag("module", module.__name__, library_version(module.__name__))
        self.tag("user module", module.__name__)
        if all(module is not known for known in self._user_modules):
            self._user_modules.append(module)

    def _enum(self, member: enum.Enum, where: str, depth: int) -> None:
        cls = type(member)
        self.tag("enum", cls.__module__, cls.__qualname__, member.name)
        self.add(member.value, f"{where}'s value", depth)

    def _dataclass(self, value, where: str, depth: int) -> None:
        """A dataclass instance (a config object): its class, its fields and other attributes (in
        name order), and the `__call__` of a callable one; its methods the code names, as an owner's."""
        cls = type(value)
        self.own(cls)
        self.tag("dataclass", cls.__module__, cls.__qualname__)
        fields = [item.name for item in dataclasses.fields(value)]
        state = {name: getattr(value, name) for name in fields if hasattr(value, name)}
        self.add({**state, **getattr(value, "__dict__", {})}, f"{where}'s fields", depth)
        if callable(value):
            self.add(cls.__call__, f"{where}'s __call__", depth)

    def _omegaconf(self, config, where: str, depth: int) -> None:
        """An OmegaConf config by its values, interpolations resolved (what the code reads from it)."""
        omegaconf = sys.modules["omegaconf"]
        try:
            values = omegaconf.OmegaConf.to_container(config, resolve=True)
        except omegaconf.errors.OmegaConfBaseException as error:
            return self._unhashed(config, where, f"a config that cannot be resolved ({type(error).__name__})")
        self.tag("omegaconf", type(config).__name__)
        self.add(values, f"{where}'s values", depth)

    def _named(self, value, where: str, depth: int) -> None:
        """A builtin function, a class or a ufunc: by its qualified name (its code is the library's);
        a builtin bound to an object other than a module also by that object."""
        name = getattr(value, "__qualname__", None) or getattr(value, "__name__", "")
        self.tag("named", type(value).__name__, getattr(value, "__module__", None), name)
        owner = getattr(value, "__self__", None)
        if not isinstance(value, (types.ModuleType, type)) and not isinstance(owner, (types.ModuleType, type(None))):
            self.add(owner, f"{where}'s object", depth)

    def _callable_object(self, value, where: str, depth: int) -> None:
        """An object of a class with `__call__`: its class, that `__call__` and its attributes."""
        cls = type(value)
        self.own(cls)
        self.tag("callable object", cls.__module__, cls.__qualname__)
        self.add(getattr(cls, "__call__", None), f"{where}'s __call__", depth)
        self.add(vars(value), f"{where}'s attributes", depth)


def data_digest(split) -> str:
    """The hex sha256 of a split's inputs and labels (shapes and dtypes included): private, never released."""
    return tensors_digest(split.inputs, split.labels)


def key_secret_streams(streams: RandomStreams, private, public, module: nn.Module) -> dict[str, str]:
    """Key the secret streams to what decides the released values beyond the config and the seed:
    the private data, the public data (read from files or split off; the warm start's too) and
    the initial parameters (initialised, or read from a checkpoint or pretrained weights; the warm
    start follows from these and the config). Returns the digests, which are never released."""
    digests = {"private_data_sha256": data_digest(private), "public_data_sha256": data_digest(public),
               "initial_state_sha256": state_digest(module)}
    streams.key_to(*digests.values())
    return digests
