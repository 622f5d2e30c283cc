"""From results to the documents a customer reads: the quote view, its workbook, HTML page, JSON and text; knows nothing of folders or mail."""
