"""What every platform shares: buttons, files in and out, the console."""
