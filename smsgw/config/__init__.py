"""What settings.py reads with: typed environment readers and the start-up checks of production mode."""
