"""Fill an intake template in LibreOffice Calc itself, through UNO, and save it as .xlsx.

Run by the system's Python (the one LibreOffice's `uno` module belongs to), not the venv:
    /usr/bin/python3 uno_fill.py TEMPLATE VALUES.json OUT.xlsx PROFILE_DIR
VALUES.json maps defined names to what a person types: numbers, text, or "=formulas".
"""

import json
import os
import subprocess
import sys
import time

import uno
from com.sun.star.beans import PropertyValue
from com.sun.star.connection import NoConnectException

XLSX_FILTER = "Calc MS Excel 2007 XML"


def prop(name, value):
    p = PropertyValue()
    p.Name, p.Value = name, value
    return p


def connect(pipe, soffice, seconds=90):
    local = uno.getComponentContext()
    resolver = local.ServiceManager.createInstanceWithContext("com.sun.star.bridge.UnoUrlResolver", local)
    deadline = time.monotonic() + seconds
    while True:
        try:
            return resolver.resolve(f"uno:pipe,name={pipe};urp;StarOffice.ComponentContext")
        except NoConnectException:
            if soffice.poll() is not None or time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def fill(doc, values):
    names = doc.NamedRanges
    for key, value in values.items():
        cell = names.getByName(key).getReferredCells().getCellByPosition(0, 0)
        if isinstance(value, (int, float)):
            cell.setValue(value)
        elif str(value).startswith("="):
            cell.setFormula(value)
        else:
            cell.setString(str(value))
    doc.calculateAll()


def main(template, values_file, out, profile):
    with open(values_file, encoding="utf-8") as f:
        values = json.load(f)
    pipe = f"sizing-uno-{os.getpid()}"
    soffice = subprocess.Popen(["soffice", "--headless", "--invisible", "--norestore", "--nologo",
                                f"-env:UserInstallation={uno.systemPathToFileUrl(profile)}",
                                f"--accept=pipe,name={pipe};urp;"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    desktop = None
    try:
        context = connect(pipe, soffice)
        desktop = context.ServiceManager.createInstanceWithContext("com.sun.star.frame.Desktop", context)
        doc = desktop.loadComponentFromURL(uno.systemPathToFileUrl(os.path.abspath(template)), "_blank", 0,
                                           (prop("Hidden", True),))
        fill(doc, values)
        doc.storeToURL(uno.systemPathToFileUrl(os.path.abspath(out)), (prop("FilterName", XLSX_FILTER),))
        doc.close(True)
    finally:
        if desktop is not None:
            try:
                desktop.terminate()
            except Exception:  # noqa: BLE001 — the bridge goes down with the office
                pass
        try:
            soffice.wait(timeout=30)
        except subprocess.TimeoutExpired:
            soffice.kill()


if __name__ == "__main__":
    main(*sys.argv[1:5])
