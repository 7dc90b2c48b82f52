from kiq.cli.main import app

app(prog_name="kiq")
