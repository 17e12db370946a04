import pytest

from infermeter.engines.emulator.process import EmulatorProcess


@pytest.fixture(scope="module")
def emulator():
    with EmulatorProcess(["--ttft-ms", "40", "--itl-ms", "8", "--max-concurrency", "64"]) as emu:
        yield emu
