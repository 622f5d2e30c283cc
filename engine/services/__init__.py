"""Long-running channels around run_job: the folder and mail services, their rule keeper and log; nothing below imports them."""
