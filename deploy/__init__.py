"""Container images and the compose stack: Dockerfiles, the NATS server config, and the
offline image builder (`python -m deploy.images`). Not part of the installed package."""
