#!/usr/bin/env bash
# Installs the OS's Chromium when it is missing, for the UI's browser test (tests/end_to_end/test_ui_browser.py
# drives it headless through Playwright's Python package; Playwright's own browser download is not used).
# CI is a clean Debian machine running as root: apt-get. Elsewhere it says what to install, and the
# browser test then fails naming it.
set -euo pipefail
if command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
  echo "Installing chromium (apt-get) for the UI's browser test"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
else
  echo "warning: no chromium on PATH: install your OS's chromium package for the UI's browser test" >&2
fi
