"""The browser tests' fixtures (tests/browser/console_env.py)."""

from tests.browser.console_env import answering, browser, console, dialogs, page

__all__ = ["answering", "browser", "console", "dialogs", "page"]
