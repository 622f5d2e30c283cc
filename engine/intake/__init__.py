"""From a file to checked values: the form, the template, the workbook and text readers, validation and the errors workbook; knows nothing of quotes or services."""
