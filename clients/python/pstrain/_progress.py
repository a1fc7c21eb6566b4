"""Keras-like progress output for Job.follow: per epoch a header ("Epoch 2/5"), a bar redrawn in
place while it runs, and the epoch's line with its figures at its end.

Three displays: a terminal (the bar redrawn with '\\r'), a notebook (one line updated in place
through IPython's display handle, when IPython runs a kernel) and plain lines (a file or a pipe:
the header and the epoch's line only, never a bar)."""
import sys
import time

BAR = 30


def _figure(name, value):
    return f"{name}: {value:.4f}"


def bar_text(done, total, elapsed, figures):
    """'1250/2345 [=============>................] - ETA: 7s - loss: 0.3121'."""
    total = max(total, 1)
    filled = int(BAR * min(done, total) / total)
    arrow = "=" * filled + (">" if filled < BAR else "") + "." * max(0, BAR - filled - 1)
    rate = elapsed / done if done else 0
    eta = f"ETA: {rate * (total - done):.0f}s" if done < total else f"{elapsed:.1f}s"
    parts = [f"{done}/{total} [{arrow}]", eta] + [_figure(k, v) for k, v in figures.items() if v is not None]
    return " - ".join(parts)


def epoch_text(event, seconds, steps):
    """The epoch's line: '469/469 - 3.2s - loss: 0.2913 - accuracy: 0.9141 - test_loss: ...'."""
    names = [("loss", "train_loss"), ("accuracy", "train_accuracy"), ("test_loss", "test_loss"),
             ("test_accuracy", "test_accuracy"), ("val_loss", "val_loss"), ("val_accuracy", "val_accuracy"),
             ("test_mae", "test_mae"), ("test_rmse", "test_rmse")]
    parts = [f"{steps}/{steps}" if steps else "", f"{seconds:.1f}s"]
    parts += [_figure(label, event[key]) for label, key in names if event.get(key) is not None]
    return " - ".join(p for p in parts if p)


def _in_notebook():
    try:
        from IPython import get_ipython  # noqa: only when installed
        shell = get_ipython()
        return shell is not None and "IPKernelApp" in getattr(shell, "config", {})
    except Exception:
        return False


class Display:
    """Where follow() writes. mode: 'terminal', 'notebook', 'lines' or None (silent)."""

    def __init__(self, file=None, mode="auto"):
        self.file = file or sys.stdout
        if mode == "auto":
            if _in_notebook():
                mode = "notebook"
            elif hasattr(self.file, "isatty") and self.file.isatty():
                mode = "terminal"
            else:
                mode = "lines"
        self.mode = mode
        self._handle = None
        self._bar_shown = False
        self._last_draw = 0.0

    def line(self, text):
        if self.mode is None:
            return
        self._clear_bar()
        if self.mode == "notebook":
            from IPython.display import display
            display({"text/plain": text}, raw=True)
        else:
            self.file.write(text + "\n")
            self.file.flush()

    def bar(self, text, force=False):
        if self.mode in (None, "lines"):
            return
        now = time.monotonic()
        if not force and now - self._last_draw < 0.1:
            return
        self._last_draw = now
        if self.mode == "notebook":
            from IPython.display import display
            if self._handle is None:
                self._handle = display({"text/plain": text}, raw=True, display_id=True)
            else:
                self._handle.update({"text/plain": text}, raw=True)
        else:
            self.file.write("\r" + text + "\033[K")
            self.file.flush()
        self._bar_shown = True

    def _clear_bar(self):
        if not self._bar_shown:
            return
        if self.mode == "terminal":
            self.file.write("\r\033[K")
        self._handle = None
        self._bar_shown = False
