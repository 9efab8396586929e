from models.db import open_database
from models.migrations import migrate
from shopapi.settings import Settings

settings = Settings.from_env()
applied = migrate(open_database(settings.database_url))
print(f"migrations applied: {', '.join(applied) or 'none (up to date)'}")
