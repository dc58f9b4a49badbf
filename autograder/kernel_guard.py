"""The tamper guard, run inside the grading kernel (autograder/execute.py sends this file's text).

Never imported: the executor reads this file and executes it in a namespace of its own, with NAME (the
builtin through which the executor calls the check) and NONCE (the secret its answers carry) given, so
the student's code cannot reach the guard by name.

It imports the watched modules. The first call of builtins.<NAME>() captures their originals and replaces itself by
the check; each later call is the check. The check uses only what it captured (a replaced setattr, vars
or id cannot fool it), and answers with NONCE, which a fake check cannot know, and the names it restored.
Besides the modules it watches what decides a cell's verdict in the kernel: the shell's and the kernel's
methods and handlers (exception handlers, traceback display, the execution machinery, code transformers),
event callbacks, trace, profile and monitoring hooks, PyTorch's global modes and module hooks, the code of
the course's finished answers, and the names the notebook's locked set-up cells defined.
"""
import builtins
import importlib
import os
import sys
import threading
import types

import IPython

MODULES = ("math", "numpy", "numpy.testing", "torch", "torch.nn", "torch.nn.functional", "torch.testing",
           "transformer_course.testing", "transformer_course.oracles", "IPython.core.interactiveshell",
           "IPython.core.ultratb", "ipykernel.ipkernel", "ipykernel.kernelbase", "ipykernel.zmqshell", "jupyter_client.session")
SWAPPED_BY_KERNEL = ("input", "exit", "quit", "get_ipython")
# Event callbacks a library registers while a cell runs (matplotlib draws or flushes figures after each
# cell); any other callback added after the capture is taken off.
LIBRARY_CALLBACKS = ("matplotlib.pyplot", "matplotlib_inline.backend_inline")
# The shell's lists of code transformers: each can rewrite a test cell before it runs.
TRANSFORMER_LISTS = ("ast_transformers", "input_transformers_post")
MISSING = object()
TOOLS = (types.ModuleType, types.FunctionType, types.BuiltinFunctionType, type)


def _import_originals():
    # From the installation, never from a file of the same name in the submission's folder.
    saved = sys.path[:]
    sys.path[:] = [p for p in saved if p not in ("", os.getcwd())]
    try:
        for name in MODULES:
            try:
                importlib.import_module(name)
            except ImportError:
                pass
    finally:
        sys.path[:] = saved
    own_work = sys.modules.get("transformer_course.own_work")
    if own_work is not None:   # the gates go up at the first test cell; up now, they are among the originals
        own_work.install_gates()
    names = [n for n in MODULES if n in sys.modules]
    names += [n for n in sys.modules if n.partition(".")[0] == "transformer_course" and n not in names]
    return [builtins] + [sys.modules[n] for n in names]


class Watch:
    # Named values and how to read and restore them: `same` says whether a value is still the original.
    def __init__(self, prefix, current, restore, originals, suffix="", same=None):
        self.prefix, self.suffix, self.current, self.restore = prefix, suffix, current, restore
        self.originals, self.same = list(originals), same or (lambda a, b: a is b)


def _dynamo_wrapping(torch):
    # torch._dynamo, imported when an optimizer is created, replaces torch.manual_seed by
    # torch._disable_dynamo(torch.manual_seed) (before the capture when the kernel server imported it ahead,
    # dispatch.KERNEL_FIRST_USE_IMPORTS; after it in the other kernels):
    # a value is still the original if it is that wrapper of it, which behaves exactly as it does.
    wrapper, type_ = torch._disable_dynamo(lambda: None), type
    code, namespace, fn = wrapper.__code__, wrapper.__globals__, wrapper.__code__.co_freevars.index("fn")

    def same(current, original):
        return current is original or (type_(current) is types.FunctionType and current.__code__ is code
                                       and current.__globals__ is namespace
                                       and current.__closure__[fn].cell_contents is original)

    return same


def _class_watch(name, cls, setattr_, delattr_):
    # Every attribute a class has, its own or inherited: one set on the class is put back (or removed).
    own = vars(cls)

    def restore(key, original):
        if original is MISSING:
            delattr_(cls, key)
        else:
            setattr_(cls, key, original)

    return Watch(name + ".", own.get, restore, [(key, own.get(key, MISSING)) for key in dir(cls)])


def _instance_watch(name, obj, extra=()):
    # An object's own attributes that replace a method of its class, and the named handler attributes.
    own = vars(obj)
    cls = type(obj)
    keys = {k for k in dir(cls) if callable(getattr(cls, k, None))} | {k for k, v in own.items() if callable(v)}

    def restore(key, original):
        if original is MISSING:
            own.pop(key, None)
        else:
            own[key] = original

    return Watch(name + ".", own.get, restore, [(key, own.get(key, MISSING)) for key in keys | set(extra)])


def _contents_watch(name, containers):
    # Lists and dicts whose contents matter (code transformers, handlers, hooks): identity and contents.
    def contents(container):
        return tuple(container.items()) if isinstance(container, dict) else tuple(container)

    def same(a, b):
        return a[0] is b[0] and len(a[1]) == len(b[1]) and all(
            (x[0] == y[0] and x[1] is y[1]) if isinstance(a[0], dict) else x is y for x, y in zip(a[1], b[1]))

    def current(key, missing):
        container = containers[key]()
        return (container, contents(container)) if container is not None else missing

    def restore(key, original):
        container, items = original
        container.clear()
        container.update(items) if isinstance(container, dict) else container.extend(items)
        containers[key](container)

    return Watch(name, current, restore, [(key, current(key, MISSING)) for key in containers], same=same)


def _function_code_watch(modules, setattr_):
    # The code of the course's functions and methods: the finished answers' gates live in it.
    functions = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, type) and value.__module__ == module.__name__:
                functions.update({f"{value.__module__}.{k}": v for k, v in vars(value).items()
                                  if isinstance(v, types.FunctionType)})
            elif isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
                functions[f"{value.__module__}.{value.__name__}"] = value
    return Watch("", lambda key, missing: functions[key].__code__,
                 lambda key, original: setattr_(functions[key], "__code__", original),
                 [(key, f.__code__) for key, f in functions.items()], suffix=".__code__")


def _package_class_watches(modules, setattr_, delattr_):
    # The attributes of the course's classes (the finished answers, own_work's refusal): a method replaced
    # on a class would bypass the gate in its code.
    classes = {value for module in modules for value in vars(module).values()
               if isinstance(value, type) and value.__module__ == module.__name__}
    return [_class_watch(f"{c.__module__}.{c.__qualname__}", c, setattr_, delattr_) for c in classes]


def _attribute(obj, name, setattr_):
    # Read obj.<name> with no argument, set it with one.
    return lambda *value: setattr_(obj, name, value[0]) if value else getattr(obj, name, None)


def _shell_watches(shell, kernel, setattr_, delattr_):
    parts = {"shell": (shell, ("custom_exceptions", "InteractiveTB", "SyntaxTB", "displayhook", "display_pub",
                                "display_formatter", "compile", "events", "input_transformer_manager")),
             "shell.events": (shell.events, ()), "shell.displayhook": (shell.displayhook, ()),
             "shell.display_pub": (shell.display_pub, ()), "shell.InteractiveTB": (shell.InteractiveTB, ()),
             "shell.SyntaxTB": (shell.SyntaxTB, ()), "shell.compile": (shell.compile, ()),
             "shell.input_transformer_manager": (shell.input_transformer_manager, ())}
    if kernel is not None:
        parts["kernel"] = (kernel, ("session", "shell", "iopub_socket", "iopub_thread", "shell_handlers",
                                    "control_handlers"))
        parts["kernel.session"] = (kernel.session, ())
    watches = [_instance_watch(name, obj, extra) for name, (obj, extra) in parts.items()]
    from IPython.core import interactiveshell
    classes = {c for obj, _ in parts.values() for c in type(obj).__mro__ if c.__module__ != "builtins"}
    classes |= {interactiveshell.ExecutionResult, interactiveshell.ExecutionInfo}
    watches += [_class_watch(f"{c.__module__}.{c.__qualname__}", c, setattr_, delattr_) for c in classes]
    manager = shell.input_transformer_manager
    lists = {f"shell.{name}": _attribute(shell, name, setattr_) for name in TRANSFORMER_LISTS}
    lists.update({f"shell.input_transformer_manager.{name}": _attribute(manager, name, setattr_)
                  for name in ("cleanup_transforms", "line_transforms", "token_transformers")})
    if kernel is not None:
        lists.update({f"kernel.{name}": _attribute(kernel, name, setattr_)
                      for name in ("shell_handlers", "control_handlers")})
    watches.append(_contents_watch("", lists))
    watches.append(Watch("sys.", vars(sys).get, lambda key, value: setattr_(sys, key, value),
                         [("excepthook", sys.excepthook)]))
    return watches


def _torch_watches(torch, setattr_):
    # Global module hooks change every module's output, the oracles' included.
    hooks = importlib.import_module("torch.nn.modules.module")
    return [_contents_watch("torch.nn.modules.module.", {
        name: _attribute(hooks, name, setattr_) for name, value in vars(hooks).items()
        if name.startswith("_global_") and isinstance(value, dict)})]


def _hook_checks(shell, setattr_, isinstance_, torch):
    # Hooks set by a call rather than an attribute: trace, profile, monitoring, event callbacks, torch modes.
    gettrace, settrace, getprofile, setprofile = sys.gettrace, sys.settrace, sys.getprofile, sys.setprofile
    monitoring = getattr(sys, "monitoring", None)
    tools = {t for t in range(6) if monitoring is not None and monitoring.get_tool(t) is not None}
    callbacks = {name: list(found) for name, found in shell.events.callbacks.items()}
    modes = ()
    if torch is not None:
        from torch.utils._device import DeviceContext
        modes = (("a torch function mode", torch._C._len_torch_function_stack, torch._C._get_function_stack_at,
                  torch._C._pop_torch_function_stack, DeviceContext),
                 ("a torch dispatch mode", torch._C._len_torch_dispatch_stack, torch._C._get_dispatch_stack_at,
                  torch._C._pop_torch_dispatch_stack, ()))

    def same_callable(a, b):
        return a is b or (isinstance_(a, types.MethodType) and isinstance_(b, types.MethodType)
                          and a.__func__ is b.__func__ and a.__self__ is b.__self__)

    def allowed_callbacks(event):
        found = list(callbacks.get(event, ()))
        for name in LIBRARY_CALLBACKS:
            module = sys.modules.get(name)
            found += list(vars(module).values()) if module is not None else []
        return found

    def check_hooks(restored):
        if gettrace() is not None or getprofile() is not None:
            settrace(None), setprofile(None)
            restored.append("sys.settrace")
        for hook in ("_trace_hook", "_profile_hook"):
            if vars(threading).get(hook) is not None:
                setattr_(threading, hook, None)
                restored.append("threading.settrace")
        for tool in range(6 if monitoring is not None else 0):
            if tool not in tools and monitoring.get_tool(tool) is not None:
                monitoring.set_events(tool, 0)
                for event in vars(monitoring.events).values():
                    if isinstance_(event, int) and event and not event & (event - 1):
                        monitoring.register_callback(tool, event, None)
                monitoring.free_tool_id(tool)
                restored.append("sys.monitoring")
        for event, found in shell.events.callbacks.items():
            allowed = allowed_callbacks(event)
            for callback in list(found):
                if not any(same_callable(callback, a) for a in allowed):
                    found.remove(callback)
                    restored.append(f"shell.events.callbacks['{event}']:{getattr(callback, '__qualname__', '?')}")
        for what, length, mode_at, pop, benign in modes:
            while length() and not isinstance_(mode_at(length() - 1), benign or ()):
                pop()
                restored.append(what)

    return check_hooks


def _compiled_names(source, compile_, isinstance_):
    # Every global or attribute name the code of ``source`` uses (empty if it is not plain Python).
    try:
        stack = [compile_(source, "<test>", "exec", dont_inherit=True)]
    except (SyntaxError, ValueError):
        return set()
    names = set()
    while stack:
        code = stack.pop()
        names.update(code.co_names)
        stack += [c for c in code.co_consts if isinstance_(c, types.CodeType)]
    return names


def install(modules):
    setattr_, delattr_, isinstance_, compile_ = builtins.setattr, builtins.delattr, builtins.isinstance, builtins.compile
    shell = IPython.get_ipython()
    user_ns, torch = shell.user_ns, sys.modules.get("torch")
    restored = []  # names put back since the last report
    protected = {"__builtins__": user_ns.get("__builtins__")}  # names the locked set-up cells defined
    seen = [dict(user_ns)]   # the namespace at the last check
    hidden = {}              # the student's names that shadow a builtin a test cell uses, while it runs
    watched = []
    names = Watch("", user_ns.get, user_ns.__setitem__, protected.items())

    def restore_all(skipped=()):
        for watch in watched:
            for key, original in watch.originals:
                if not (watch.prefix == "builtins." and key in skipped) and \
                        not watch.same(watch.current(key, MISSING), original):
                    watch.restore(key, original)
                    restored.append(watch.prefix + key + watch.suffix)

    def check(protect=False, test_source=None):
        for name, value in hidden.items():
            user_ns.setdefault(name, value)
        hidden.clear()
        if protect:  # the cell just run is a locked set-up cell: the modules, functions and classes it
            # defined are the notebook's (its other values, loop variables say, later cells may reuse)
            protected.update({k: v for k, v in user_ns.items() if not k.startswith("_") and isinstance_(v, TOOLS)
                              and seen[0].get(k, MISSING) is not v})
            names.originals = list(protected.items())
        restore_all()
        check_hooks(restored)
        seen[0] = dict(user_ns)
        for name in _compiled_names(test_source, compile_, isinstance_) if test_source else ():
            if name in builtin_originals and user_ns.get(name, builtin_originals[name]) is not builtin_originals[name]:
                hidden[name] = user_ns.pop(name)
        report = NONCE + " " + " ".join(restored)  # noqa: F821
        restored.clear()
        return report

    # Before the capture, so that the check is one of the originals. NAME is set by the executor.
    setattr_(builtins, NAME, check)  # noqa: F821
    shell.events.register("post_execute", lambda: restore_all(SWAPPED_BY_KERNEL))
    same_in_torch = _dynamo_wrapping(torch) if torch is not None else None
    watched += [Watch(m.__name__ + ".", vars(m).get, vars(m).__setitem__, list(vars(m).items()),
                      same=same_in_torch if m is torch else None) for m in modules]
    watched.append(Watch("sys.modules['", sys.modules.get, sys.modules.__setitem__,
                         [(m.__name__, m) for m in modules], suffix="']"))
    if torch is not None:
        watched.append(_class_watch("torch.Tensor", torch.Tensor, setattr_, delattr_))
        watched += _torch_watches(torch, setattr_)
    watched += _shell_watches(shell, getattr(shell, "kernel", None), setattr_, delattr_)
    package = [m for m in modules if m.__name__.startswith("transformer_course")]
    watched.append(_function_code_watch(package, setattr_))
    watched += _package_class_watches(package, setattr_, delattr_)
    watched.append(names)
    check_hooks = _hook_checks(shell, setattr_, isinstance_, torch)
    builtin_originals = dict(vars(builtins))

    return check()


# Imported now, captured by the first call (made like every check, outside IPython's run_cell, which
# adds and removes a few builtins of its own).
_modules = _import_originals()
setattr(builtins, NAME, lambda *args, **kwargs: install(_modules))  # noqa: F821
