"""One headless Chromium for every browser test of the session: Debian's chromium and
chromium-driver (`make tools` installs them), driven by Selenium; nothing is downloaded."""

import os
import shutil
from collections.abc import Iterator

import pytest

CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


@pytest.fixture(scope="session")
def browser() -> Iterator[object]:
    if not (shutil.which(CHROMIUM) and shutil.which(CHROMEDRIVER)):
        pytest.skip(
            "chromium or chromedriver missing: `make tools` installs Debian's chromium and"
            " chromium-driver"
        )
    # Selenium Manager would otherwise look for a driver or browser to download.
    os.environ["SE_OFFLINE"] = "true"
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for argument in (
        "--headless=new",
        "--no-sandbox",  # the tests may run as root (CI does)
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--window-size=1280,1000",
        "--lang=en",
    ):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(CHROMEDRIVER))
    driver.implicitly_wait(0)
    try:
        yield driver
    finally:
        driver.quit()
