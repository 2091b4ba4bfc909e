// Empty: `import MultipeerConnectivity.MCError` brings the Swift module MultipeerConnectivity, which declares it.
