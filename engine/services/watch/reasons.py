"""The plain-language notes the folder service leaves beside a failed or duplicate file."""

from __future__ import annotations

import time

NOTES = {
    "en": {
        "invalid": "{name} could not be quoted: some entries need fixing.",
        "failed": "{name} could not be quoted: it could not be read as an intake.",
        "ours": "{name} could not be quoted because of a problem in the sizing rules or the "
                "service, not in your file.",
        "list": "What to fix (each line says where):",
        "workbook": "{errors}, next to this note, is your workbook with every cell to fix marked.",
        "again": "Fix the file and drop it into the inbox again.",
        "tell": "Please tell the sizing team. The file is kept here; drop it into the inbox "
                "again once they have fixed it.",
        "footer": "Rule set {ruleset}.",
    },
    "zh-TW": {
        "invalid": "無法為 {name} 報價：部分欄位需要修正。",
        "failed": "無法為 {name} 報價：無法讀取為需求表。",
        "ours": "無法為 {name} 報價，原因在計算規則或服務本身，而不是您的檔案。",
        "list": "需要修正的地方（每行標明位置）：",
        "workbook": "同資料夾中的 {errors} 是您的活頁簿，已標出每個需要修正的儲存格。",
        "again": "修正後請重新放入 inbox 資料夾。",
        "tell": "請通知 sizing 團隊。檔案保留在此；修復後可重新放入 inbox。",
        "footer": "規則集 {ruleset}。",
    },
    "zh-CN": {
        "invalid": "无法为 {name} 报价：部分字段需要修正。",
        "failed": "无法为 {name} 报价：无法读取为需求表。",
        "ours": "无法为 {name} 报价，原因在计算规则或服务本身，而不是您的文件。",
        "list": "需要修正的地方（每行标明位置）：",
        "workbook": "同文件夹中的 {errors} 是您的工作簿，已标出每个需要修正的单元格。",
        "again": "修正后请重新放入 inbox 文件夹。",
        "tell": "请通知 sizing 团队。文件保留在此；修复后可重新放入 inbox。",
        "footer": "规则集 {ruleset}。",
    },
}


def reason_text(name: str, job) -> str:
    """`<name>.reason.txt`: what went wrong, where, and who can fix it, in the intake's language."""
    notes = NOTES.get(job.language, NOTES["en"])
    # Problems a salesperson cannot fix (a rule file, a bug) must not read like their mistake.
    ours = any(p.fixer in ("developer", "rules") for p in job.problems)
    headline = "ours" if ours else ("invalid" if job.status == "invalid" else "failed")
    lines = [notes[headline].format(name=name), "", notes["list"]]
    lines += [f"  - {p}" for p in job.problems] or ["  - ?"]
    lines.append("")
    errors = [p.name for p in job.outputs if p.name.endswith(".errors.xlsx")]
    if errors:
        lines.append(notes["workbook"].format(errors=errors[0]))
    lines.append(notes["tell" if ours else "again"])
    if job.ruleset_version:                # unknown when no rule set was loaded: said by nothing, not "-"
        lines += ["", notes["footer"].format(ruleset=job.ruleset_version)]
    return "\n".join(lines) + "\n"


def duplicate_text(name: str, earlier, copies: list[str]) -> str:
    """`<stem>.duplicate.txt`: why this drop was answered with copies of an earlier quote."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(earlier.finished or time.time()))
    return (f"{name} has the same content as {earlier.name}, quoted on {when} with rule set "
            f"{earlier.ruleset}. It was not quoted again: the files below are copies of that "
            "quote under this file's name.\n" + "".join(f"  {c}\n" for c in copies))
