// Empty: `import MultipeerConnectivity.MCSession` brings the Swift module MultipeerConnectivity, which declares it.
