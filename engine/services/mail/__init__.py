"""The mailbox: read requests over IMAP, quote their attachments, reply over SMTP, exactly once each."""
