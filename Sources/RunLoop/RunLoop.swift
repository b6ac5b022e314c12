// The RunLoop module arrives with its issue.
