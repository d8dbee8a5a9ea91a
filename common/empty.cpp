// Lets a library whose directory holds no sources yet still be a target.
