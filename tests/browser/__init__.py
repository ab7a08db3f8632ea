"""The console in a real browser: headless Chromium driven by Selenium against a real cluster and a real
C{twlog console} (L{tests.browser.harness}); the tests are tests/integration/test_console_browser.py, the
screenshots of docs/console.md are made by C{python -m tests.browser.screenshots}."""
